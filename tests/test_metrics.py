"""The shipped metric modules load offline by path and agree with sacreBLEU called directly."""

from __future__ import annotations

import re

import evaluate
import numpy as np
import pytest
import sacrebleu
from transformers import EvalPrediction

from encdec.metrics import build_compute_metrics, load_metric, metric_path
from tiny_model_folders import date_tokenizer

HYPOTHESES = ["The cat sat on the mat .", "a quick brown fox", "Hello World", "2021-03-03"]
REFERENCES = ["the cat sat on a mat .", "The quick brown fox jumps", "hello world", "2021-03-03"]


@pytest.fixture(scope="module")
def bleu() -> evaluate.EvaluationModule:
    return load_metric("bleu")


@pytest.fixture(scope="module")
def chrf() -> evaluate.EvaluationModule:
    return load_metric("chrf")


@pytest.mark.parametrize("name", ["bleu", "chrf"])
def test_evaluate_loads_the_script_or_its_folder_offline(name: str) -> None:
    for path in (metric_path(name), metric_path(name).parent):
        module = evaluate.load(str(path))
        assert module.compute(predictions=["a b c d"], references=["a b c d"])["score"] == pytest.approx(100.0)


def test_bleu_equals_sacrebleu_with_its_signature(bleu: evaluate.EvaluationModule) -> None:
    result = bleu.compute(predictions=HYPOTHESES, references=REFERENCES)
    direct = sacrebleu.metrics.BLEU()
    expected = direct.corpus_score(HYPOTHESES, [REFERENCES])
    assert result["score"] == pytest.approx(expected.score)
    assert result["signature"] == str(direct.get_signature())
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|")
    assert (result["counts"], result["totals"], result["bp"]) == (expected.counts, expected.totals, expected.bp)


def test_bleu_takes_several_references_per_segment(bleu: evaluate.EvaluationModule) -> None:
    second = [ref.upper() for ref in REFERENCES]
    per_segment = [[first, other] for first, other in zip(REFERENCES, second, strict=True)]
    result = bleu.compute(predictions=HYPOTHESES, references=per_segment)
    assert result["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES, second]).score)
    assert result["signature"].startswith("nrefs:2|")
    with pytest.raises(ValueError, match="same number of references"):
        bleu.compute(predictions=HYPOTHESES[:2], references=[["a"], ["b", "c"]])


def test_lowercase_bleu_ignores_case(bleu: evaluate.EvaluationModule) -> None:
    cased = bleu.compute(predictions=HYPOTHESES, references=REFERENCES)
    lowercased = bleu.compute(predictions=HYPOTHESES, references=REFERENCES, lowercase=True)
    assert lowercased["score"] > cased["score"]
    assert lowercased["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True).score)
    assert "|case:lc|" in lowercased["signature"]


def test_chrf_equals_sacrebleu_with_its_signature(chrf: evaluate.EvaluationModule) -> None:
    for word_order in (0, 2):  # chrF, chrF++
        result = chrf.compute(predictions=HYPOTHESES, references=REFERENCES, word_order=word_order)
        direct = sacrebleu.metrics.CHRF(word_order=word_order)
        assert result["score"] == pytest.approx(direct.corpus_score(HYPOTHESES, [REFERENCES]).score)
        assert result["signature"] == str(direct.get_signature())
        assert f"|nw:{word_order}|" in result["signature"]


def test_unknown_metric_name_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("Unknown metric 'rouge'; encdec ships ['bleu', 'chrf']")):
        metric_path("rouge")


def test_compute_metrics_decodes_generated_ids_with_trainer_padding() -> None:
    tokenizer = date_tokenizer(num_pairs=100, vocab_size=80)
    targets = ["2021-03-03", "1999-12-31", "2049-01-15"]
    hypotheses = ["2021-03-03", "1999-12-30", "2049-01"]
    pad = tokenizer.pad_token_id

    def padded(texts: list[str], fill: int, start: list[int]) -> np.ndarray:
        rows = [start + tokenizer(text)["input_ids"] for text in texts]
        width = max(map(len, rows)) + 2  # and some padding on every row
        return np.array([row + [fill] * (width - len(row)) for row in rows])

    # generate() pads with the pad id after the decoder start token; the Trainer pads across batches with -100
    predictions = padded(hypotheses, pad, start=[tokenizer.bos_token_id])
    predictions[:, -1] = -100
    labels = padded(targets, -100, start=[])
    compute_metrics = build_compute_metrics(tokenizer)

    result = compute_metrics(EvalPrediction(predictions=predictions, label_ids=labels))
    assert set(result) == {"bleu", "chrf", "gen_len"}
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [targets]).score, abs=1e-4)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [targets]).score, abs=1e-4)
    generated_lengths = [1 + len(tokenizer(text)["input_ids"]) for text in hypotheses]  # start token + ids + EOS
    assert result["gen_len"] == pytest.approx(np.mean(generated_lengths), abs=1e-4)
    # beam search fills a finished row with EOS instead of pad: the same length
    filled = np.where(predictions == pad, tokenizer.eos_token_id, predictions)
    beam = compute_metrics(EvalPrediction(predictions=filled, label_ids=labels))
    assert beam == result
    perfect = compute_metrics((padded(targets, pad, start=[tokenizer.bos_token_id]), labels))
    assert (perfect["bleu"], perfect["chrf"]) == (100.0, 100.0)
    with pytest.raises(ValueError, match="predict_with_generate=True"):
        compute_metrics((np.zeros((3, 4, len(tokenizer)), dtype=np.float32), labels))
