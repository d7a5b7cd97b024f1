"""BLEU and chrF as ``evaluate`` modules shipped inside the package, so they load without the Hub.

``evaluate.load("sacrebleu")`` downloads its script from the Hub; ``load_metric("bleu")`` loads
``encdec/metrics/bleu/bleu.py`` from the installed package instead. Both modules call sacreBLEU directly and
return its signature with the score.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import evaluate
import numpy as np
from transformers import EvalPrediction, PreTrainedTokenizerBase

METRICS = ("bleu", "chrf")


def metric_path(name: str) -> Path:
    """The script of the shipped metric ``name`` ("bleu" or "chrf"), for ``evaluate.load(str(path))``."""
    if name not in METRICS:
        raise ValueError(f"Unknown metric {name!r}; encdec ships {list(METRICS)}.")
    return Path(__file__).parent / name / f"{name}.py"


def load_metric(name: str, **kwargs) -> evaluate.EvaluationModule:
    """Load the shipped metric ``name`` ("bleu" or "chrf") with ``evaluate.load``, offline.

    ``kwargs`` go to ``evaluate.load``; by default the module keeps its inputs in memory (no cache files).
    """
    kwargs.setdefault("keep_in_memory", True)
    return evaluate.load(str(metric_path(name)), **kwargs)


def generated_lengths(generated: np.ndarray, pad_id: int, eos_id: int | None) -> np.ndarray:
    """Each row's length up to and including its first EOS; a row without EOS: its non-pad ids."""
    non_pad = np.count_nonzero(generated != pad_id, axis=1)
    if eos_id is None:
        return non_pad
    is_eos = generated == eos_id
    return np.where(is_eos.any(axis=1), is_eos.argmax(axis=1) + 1, non_pad)


def build_compute_metrics(tokenizer: PreTrainedTokenizerBase) -> Callable[[EvalPrediction], dict[str, float]]:
    """A ``compute_metrics`` for ``Seq2SeqTrainer`` with ``predict_with_generate=True``.

    The returned function decodes the generated ids and the labels (-100, the Trainer's padding, becomes the pad
    id; special tokens are skipped) and returns corpus BLEU (sacreBLEU, cased, 13a), chrF and the mean generated
    length in tokens, each rounded to 4 decimals. A row's length runs to its first EOS, included (beam search fills
    a finished row with EOS, not pad: counting non-pad ids, as the transformers examples do, counts that filling);
    a row without EOS counts its non-pad ids.
    """
    bleu, chrf = load_metric("bleu"), load_metric("chrf")
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id

    def decode(ids: np.ndarray) -> list[str]:
        ids = np.where(ids != -100, ids, pad_id)
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def compute_metrics(eval_prediction: EvalPrediction) -> dict[str, float]:
        predictions, labels = eval_prediction[0], eval_prediction[1]
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.asarray(predictions)
        if predictions.ndim != 2 or not np.issubdtype(predictions.dtype, np.integer):
            raise ValueError(
                f"compute_metrics needs generated token ids (batch, length), got an array of shape "
                f"{predictions.shape} and dtype {predictions.dtype}; set `predict_with_generate=True`."
            )
        hypotheses, references = decode(predictions), decode(np.asarray(labels))
        generated = np.where(predictions != -100, predictions, pad_id)
        return {
            "bleu": round(float(bleu.compute(predictions=hypotheses, references=references)["score"]), 4),
            "chrf": round(float(chrf.compute(predictions=hypotheses, references=references)["score"]), 4),
            "gen_len": round(float(np.mean(generated_lengths(generated, pad_id, eos_id))), 4),
        }

    return compute_metrics


__all__ = ["METRICS", "build_compute_metrics", "load_metric", "metric_path"]
