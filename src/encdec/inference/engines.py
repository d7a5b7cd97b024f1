"""Inference engines: what turns a batch of source ids into output ids. ``inference.translate`` does the rest
(tokenising, batching longest first, decoding), the same for every engine.

- ``TorchEngine``: the model's ``generate()``, in float32, in bfloat16 (``dtype="bfloat16"``) or with the linear
  and LSTM/GRU layers in dynamic int8 (``quantize="int8"``).
- ``CTranslate2Engine``: a folder written by ``encdec export --format ctranslate2`` (``encdec.ship.export``), decoded
  by CTranslate2 (an optional extra, ``encdec[ct2]``), with its weights computed in float32, int8 or bfloat16.

Each engine maps the decoding options it has (beam size, length penalty, max new tokens, number of returned
sequences, sampling) and refuses the others in one line that names the option.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoTokenizer, GenerationConfig, PreTrainedModel

from ..errors import EncdecError
from ..folders import EXPORT_INFO, read_json, require_model_folder
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig

ENGINES = ("torch", "ctranslate2")
QUANTIZE_CHOICES = ("int8",)
DTYPE_CHOICES = ("float32", "bfloat16")
CT2_INSTALL = "pip install 'encdec[ct2]'"
# generate() options CTranslate2's translate_batch has, under its names
CT2_OPTIONS = {"num_beams": "beam_size", "length_penalty": "length_penalty", "num_return_sequences": "num_hypotheses",
               "top_k": "sampling_topk", "top_p": "sampling_topp", "temperature": "sampling_temperature",
               "repetition_penalty": "repetition_penalty", "no_repeat_ngram_size": "no_repeat_ngram_size",
               "min_new_tokens": "min_decoding_length"}


# what generate() takes for an option that neither the call nor the generation config sets (transformers'
# GenerationConfig._get_default_generation_params)
GENERATE_DEFAULTS = {"do_sample": False, "num_beams": 1, "length_penalty": 1.0, "num_return_sequences": 1, "top_k": 50,
                     "top_p": 1.0, "temperature": 1.0, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                     "min_new_tokens": 0, "early_stopping": False}


# When int8 is the slower choice, measured by scripts/benchmark_int8.py (the table, the command and the machine are
# in docs/fast-inference.md#when-int8-pays): per (engine, model_type), the config key that sizes the model, the
# smallest measured size from which int8 was faster than float32 in every measurement (1 and 2 threads, greedy and
# beam 5), and the largest int8 / float32 time measured below that size. A family int8 paid for at every measured
# size is absent. Re-run the script and update this table when the engines, their versions or the CPU change.
INT8_MEASURED: dict[tuple[str, str], tuple[str, int, float]] = {
    ("torch", "transformer_seq2seq"): ("d_model", 192, 1.23),
    ("torch", "rnn_seq2seq"): ("hidden_size", 512, 3.78),
    ("ctranslate2", "transformer_seq2seq"): ("d_model", 192, 1.22),
}
INT8_DOC = "docs/fast-inference.md#when-int8-pays"
_int8_notes_said: set[str] = set()  # the notes this process has printed


def int8_note(engine: str, config: Mapping[str, Any] | Any) -> str | None:
    """The one-line note for int8 asked of ``engine`` (``"torch"`` or ``"ctranslate2"``, on a CPU) for a model of
    ``config`` (a model config, or its dict): int8 measured slower than float32 for models this small, by how much,
    and where the measurements are; None where int8 measured faster at that size or the family was not measured."""
    def value(key: str) -> Any:
        return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)

    measured = INT8_MEASURED.get((engine, value("model_type")))
    if measured is None:
        return None
    key, pays_from, slowdown = measured
    size = value(key)
    if not isinstance(size, int) or size >= pays_from:
        return None
    return (f"note: int8 measured slower than float32 for models this small ({key} {size} < {pays_from}) on "
            f"{engine}: up to {slowdown:.1f}x the float32 time; see {INT8_DOC}")


def note_if_int8_is_slower(engine: str, config: Mapping[str, Any] | Any) -> None:
    """Print ``int8_note`` to stderr where there is one, once per process (an evaluation of many checkpoints, or a
    server of several models of one size, says it once)."""
    note = int8_note(engine, config)
    if note is not None and note not in _int8_notes_said:
        _int8_notes_said.add(note)
        print(note, file=sys.stderr, flush=True)


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class CTranslate2Missing(EncdecError):
    """CTranslate2 is needed and not installed."""


def require_ctranslate2() -> Any:
    """The ``ctranslate2`` module, or a one-line error that says how to install it. Imported only when an engine
    or an export needs it: its OpenMP runtime, loaded into a process that runs torch, slows both."""
    try:
        return importlib.import_module("ctranslate2")
    except ImportError as error:
        raise CTranslate2Missing(f"CTranslate2 is not installed; install the extra with `{CT2_INSTALL}`.") from error


def quantize_int8(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` with every ``nn.Linear``, ``nn.LSTM`` and ``nn.GRU`` in dynamic int8: weights stored in int8, each
    activation quantised on the fly (Jacob et al. 2018), for CPU inference.

    This is torch's eager ``quantize_dynamic``: the one maintained CPU path that covers the recurrent layers too
    (torchao's dynamic int8 covers linear layers only). torch 2.13 marks ``torch.ao.quantization`` deprecated in
    favour of torchao and warns on every call; with no replacement for LSTM/GRU, the notice is silenced here rather
    than shown to users, who cannot act on it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.ao\.quantization is deprecated", DeprecationWarning)
        warnings.filterwarnings("ignore", r".*quantize_per_tensor.*deprecated", UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear, nn.LSTM, nn.GRU}, dtype=torch.qint8)


class TorchEngine:
    """A model's own ``generate()``: every option of it works."""

    name = "torch"

    def __init__(self, model: PreTrainedModel, quantize: str | None = None, dtype: str | None = None) -> None:
        check_precision(quantize, dtype)
        if quantize == "int8":
            if model.device.type == "cpu":  # where dynamic int8 runs, and what was measured
                note_if_int8_is_slower(self.name, model.config)
            model = quantize_int8(model)  # a copy
        elif dtype == "bfloat16":
            model = copy.deepcopy(model).to(torch.bfloat16)  # the caller's model stays as it is
        self.model = model.eval()
        self.config = model.config
        self.generation_config = model.generation_config

    @property
    def precision(self) -> str:
        """What the model computes in, read from the model rather than from the options asked for (a quantization
        that did nothing shows): ``int8_float32`` when dynamic int8 layers replaced its linear layers (int8 weights
        and matrix products, the rest in float32, as CTranslate2 names it), else its weights' dtype."""
        if any(isinstance(module, torch.ao.nn.quantized.dynamic.Linear) for module in self.model.modules()):
            return "int8_float32"
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 settings: dict[str, Any]) -> list[list[int]]:
        """:param input_ids: (B, S) right-padded :return: each output's ids (num_return_sequences per source)"""
        device = self.model.device
        with torch.inference_mode():
            generated = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                            max_new_tokens=max_new_tokens, **settings)  # (B x n, 1 + T)
        return generated.tolist()

    def teacher_forced(self, source_ids: list[int], target_ids: list[int], alignment: bool = False
                       ) -> tuple[list[float], torch.Tensor | None]:
        """Score one translation: the log-probability of each target token given the source and the tokens before
        it, and with ``alignment`` the cross-attention (S, T) that produced them (``alignment_matrix``).

        :param target_ids: the T output tokens, without the decoder start token (the model prepends it)
        """
        device = self.model.device
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([source_ids], device=device),
                             labels=torch.tensor([target_ids], device=device), output_attentions=alignment)
        log_probs = out.logits[0].float().log_softmax(-1)  # (T, V)
        chosen = log_probs.gather(-1, torch.tensor(target_ids, device=device)[:, None])[:, 0]  # (T,)
        weights = alignment_matrix(out.cross_attentions) if alignment and out.cross_attentions else None
        return chosen.tolist(), weights


def alignment_matrix(cross_attentions: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """One sentence's cross-attention as a (S, T) source x target matrix: column t holds the weights over the source
    when target token t was produced, averaged over the decoder layers and heads (the RNN has one of each: its
    alignment, Bahdanau et al. 2015 Eq. 6 / Luong et al. 2015 Eq. 7).

    :param cross_attentions: one entry per decoder layer, each (1, H, T, S)
    """
    weights = torch.stack([layer[0].float() for layer in cross_attentions])  # (L, H, T, S)
    return weights.mean(dim=(0, 1)).transpose(0, 1)  # (S, T)


def check_precision(quantize: str | None, dtype: str | None) -> None:
    if quantize is not None and quantize not in QUANTIZE_CHOICES:
        raise EncdecError(f"`quantize` must be one of {list(QUANTIZE_CHOICES)} (or none), got {quantize!r}.")
    if dtype is not None and dtype not in DTYPE_CHOICES:
        raise EncdecError(f"`dtype` must be one of {list(DTYPE_CHOICES)} (or none), got {dtype!r}.")
    if quantize and dtype not in (None, "float32"):
        raise EncdecError(f"Choose `quantize`={quantize!r} or `dtype`={dtype!r}, not both: int8 weights compute "
                          "their activations in float32.")


def read_export_info(export_dir: str | os.PathLike) -> dict[str, Any]:
    """``encdec_export.json`` of an exported folder; a clear error when ``export_dir`` is not one."""
    export_dir = require_model_folder(export_dir, engine="ctranslate2")
    return read_json(export_dir / EXPORT_INFO, "the export record")


class CTranslate2Engine:
    """A CTranslate2 ``Translator`` over an exported folder. It reads tokens, not ids: the source ids become their
    tokens (the ``</s>`` that ``generate()`` sees included) and the output tokens become ids again."""

    name = "ctranslate2"

    def __init__(self, export_dir: str | os.PathLike, quantize: str | None = None, dtype: str | None = None,
                 device: str = "cpu", threads: int | None = None) -> None:
        check_precision(quantize, dtype)
        ct2 = require_ctranslate2()
        export_dir = Path(export_dir)
        info = read_export_info(export_dir)
        self.config = TransformerSeq2SeqConfig.from_dict(info["model_config"])
        self.generation_config = GenerationConfig.from_pretrained(export_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(export_dir)
        # the weights are converted to the type asked for at load time; none asked: the type the export stored them
        # in (CTranslate2's "default"), so an int8 export computes in int8 without --quantize int8 again
        compute_type = quantize or dtype or "default"
        threads = torch.get_num_threads() if threads is None else threads  # as many as torch would use
        kind, _, index = device.partition(":")  # "cuda:1" (a process of a launch): CTranslate2 takes the index apart
        try:
            self.translator = ct2.Translator(str(export_dir), device=kind, device_index=int(index or 0),
                                             compute_type=compute_type, intra_threads=threads)
        except ValueError as error:  # e.g. bfloat16 on a CPU without it
            wanted = compute_type if compute_type != "default" else f"{info['quantization']} (the export's type)"
            raise EncdecError(f"CTranslate2 cannot compute in {wanted} on {device}: "
                              f"{' '.join(str(error).split())}") from error
        self.precision = self.translator.compute_type  # what it computes in (e.g. int8_float32 for int8 on a CPU)
        if kind == "cpu" and self.precision.startswith("int8"):  # asked for, or the type an int8 export stored
            note_if_int8_is_slower(self.name, self.config)

    def options(self, settings: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
        """``generate()`` settings as ``translate_batch`` options, unset ones taken from the model's generation
        config, then transformers' defaults, as ``generate()`` takes them; a one-line error for any it lacks."""
        unknown = sorted(set(settings) - set(CT2_OPTIONS) - {"do_sample", "early_stopping"})
        if unknown:
            raise EncdecError(f"The ctranslate2 engine has no option {unknown[0]!r}; it maps {sorted(CT2_OPTIONS)}, "
                              "plus do_sample and early_stopping. Use --engine torch for the others.")
        configured = {key: getattr(self.generation_config, key, None)
                      for key in (*CT2_OPTIONS, "do_sample", "early_stopping")}
        chosen = {**GENERATE_DEFAULTS, **drop_none(configured), **drop_none(settings)}
        options = {CT2_OPTIONS[key]: value for key, value in chosen.items() if key in CT2_OPTIONS}
        # generate()'s beam search goes on past the first num_beams finished hypotheses while a running beam can
        # still beat one (early_stopping=False, its default); CTranslate2 stops at beam_size x patience finished
        # ones. Patience 2 reproduces generate(): 99.9% identical beam-5 outputs on Multi30k test2016, against
        # 95.9% with CTranslate2's default of 1, which matches early_stopping=True.
        early_stopping = chosen.pop("early_stopping", False)
        if early_stopping not in (True, False):
            raise EncdecError(f"The ctranslate2 engine maps `early_stopping` True or False, not {early_stopping!r}.")
        options["patience"] = 1.0 if early_stopping else 2.0
        if chosen["do_sample"]:
            if options["beam_size"] != 1:
                raise EncdecError("The ctranslate2 engine samples with one beam only; pass num_beams=1 with sampling.")
        else:  # generate() ignores them without do_sample
            options.update(sampling_topk=1, sampling_topp=1.0, sampling_temperature=1.0)
        # max_new_tokens counts the </s>, as max_decoding_length does; sources are never cut (max_input_length 0)
        return {**options, "max_decoding_length": max_new_tokens, "max_input_length": 0}

    def check_lengths(self, source_length: int, max_new_tokens: int) -> None:
        """The exported position table has ``max_position_embeddings`` rows, for sources and targets alike."""
        limit = self.config.max_position_embeddings
        if source_length > limit:
            raise EncdecError(f"A source of {source_length} tokens exceeds the {limit} positions exported to "
                              "CTranslate2 (`max_position_embeddings`); shorten it, or translate with truncation.")
        if max_new_tokens + 1 > limit:  # the decoder start token takes position 0
            raise EncdecError(f"`max_new_tokens`={max_new_tokens} needs {max_new_tokens + 1} decoder positions; the "
                              f"CTranslate2 export has {limit} (`max_position_embeddings`): use at most {limit - 1}.")

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 settings: dict[str, Any]) -> list[list[int]]:
        """:return: each output's ids, the start token first, as ``generate()`` returns them"""
        self.check_lengths(int(attention_mask.sum(dim=1).max()), max_new_tokens)
        tokens = [self.tokenizer.convert_ids_to_tokens(row[mask.bool()].tolist())
                  for row, mask in zip(input_ids, attention_mask, strict=True)]
        results = self.translator.translate_batch(tokens, **self.options(settings, max_new_tokens))
        start, eos = self.config.decoder_start_token_id, self.config.eos_token_id
        # CTranslate2 leaves out the </s>; a hypothesis shorter than the budget (which counts the </s>) ended with it
        return [[start, *self.tokenizer.convert_tokens_to_ids(hypothesis), *([eos] if len(hypothesis) < max_new_tokens
                                                                             else [])]
                for result in results for hypothesis in result.hypotheses]

    def teacher_forced(self, source_ids: list[int], target_ids: list[int], alignment: bool = False
                       ) -> tuple[list[float], None]:
        """Each target token's log-probability, from ``score_batch`` (which appends ``</s>`` itself). CTranslate2
        returns no attention when scoring, so ``alignment`` is refused: use the torch engine for alignments."""
        if alignment:
            raise EncdecError("The ctranslate2 engine returns no alignments; use the torch engine for them.")
        eos = self.config.eos_token_id
        ended = bool(target_ids) and target_ids[-1] == eos
        tokens = self.tokenizer.convert_ids_to_tokens(target_ids[:-1] if ended else target_ids)
        scored = self.translator.score_batch([self.tokenizer.convert_ids_to_tokens(source_ids)], [tokens])[0]
        return list(scored.log_probs if ended else scored.log_probs[:-1]), None


__all__ = ["CT2_INSTALL", "CTranslate2Engine", "CTranslate2Missing", "DTYPE_CHOICES", "ENGINES", "EXPORT_INFO",
           "INT8_DOC", "INT8_MEASURED", "QUANTIZE_CHOICES", "TorchEngine", "alignment_matrix", "int8_note",
           "note_if_int8_is_slower", "quantize_int8", "read_export_info", "require_ctranslate2"]
