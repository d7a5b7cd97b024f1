"""The CTranslate2 engine: a folder written by ``encdec export --format ctranslate2``
(``encdec.ship.ctranslate2_export``), decoded by CTranslate2 (an optional extra, ``encdec[ct2]``), with its weights
computed in float32, int8 or bfloat16. It maps
the decoding options CTranslate2 has (beam size, length penalty, max new tokens, number of returned sequences,
sampling) and refuses the others in one line that names the option. Two rules of an imported Marian model's generation
config are kept: ``bad_words_ids`` (its pad token is never generated) becomes ``suppress_sequences``, and
``forced_eos_token_id`` (``</s>`` is the last token a budget allows) a budget one token shorter, with ``</s>``
appended. Greedy search then gives ``generate()``'s tokens; beam search may rank a hypothesis now and then otherwise
(CTranslate2 masks a suppressed token before the softmax, ``generate()`` after it, and scores a hypothesis cut at a
full budget without its forced ``</s>``). The ``ctranslate2`` module is imported only
when this engine (or an export) is used (``require_ctranslate2``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from ...backends import BACKENDS
from ...errors import EncdecError
from ...folders import read_json, require_model_folder
from ...models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .int8 import note_if_int8_is_slower, note_once, saturation_note
from .interface import Engine, check_positions, check_precision

BACKEND = BACKENDS["ctranslate2"]  # its declaration in encdec.backends: this engine, its export and its folders
CT2_INSTALL = BACKEND.install
EXPORT_INFO = BACKEND.marker  # encdec_export.json: what `encdec export --format ctranslate2` records in its folder
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


def read_export_info(export_dir: str | os.PathLike) -> dict[str, Any]:
    """``encdec_export.json`` of an exported folder; a clear error when ``export_dir`` is not one."""
    export_dir = require_model_folder(export_dir, engine=BACKEND.name)
    return read_json(export_dir / EXPORT_INFO, "the export record")


def computes_int8(compute_type: str, info: dict[str, Any]) -> bool:
    """Whether CTranslate2 computes in int8 given ``compute_type``: asked for, or ``"default"`` on an int8 export."""
    return (compute_type if compute_type != "default" else str(info.get("quantization"))).startswith("int8")


class CTranslate2Engine(Engine):
    """A CTranslate2 ``Translator`` over an exported folder. It reads tokens, not ids: the source ids become their
    tokens (the ``</s>`` that ``generate()`` sees included) and the output tokens become ids again."""

    name = "ctranslate2"

    def __init__(self, export_dir: str | os.PathLike, quantize: str | None = None, dtype: str | None = None,
                 device: str = "cpu", threads: int | None = None) -> None:
        check_precision(self.spec, quantize, dtype)
        ct2 = require_ctranslate2()
        export_dir = Path(export_dir)
        info = read_export_info(export_dir)
        self.config = TransformerSeq2SeqConfig.from_dict(info["model_config"])
        self.generation_config = GenerationConfig.from_pretrained(export_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(export_dir)
        # the weights are converted to the type asked for at load time; none asked: the type the export stored them
        # in (CTranslate2's "default"), so an int8 export computes in int8 without --quantize int8 again
        compute_type = quantize or dtype or "default"
        kind, _, index = device.partition(":")  # "cuda:1" (a process of a launch): CTranslate2 takes the index apart
        if kind == "cpu" and computes_int8(compute_type, info) and saturation_note(self.name):
            note_once(saturation_note(self.name))  # its int8 is not exact on this CPU; float32 is
            compute_type = "float32"
        threads = torch.get_num_threads() if threads is None else threads  # as many as torch would use
        try:
            self.translator = ct2.Translator(str(export_dir), device=kind, device_index=int(index or 0),
                                             compute_type=compute_type, intra_threads=threads)
        except ValueError as error:  # e.g. bfloat16 on a CPU without it
            wanted = compute_type if compute_type != "default" else f"{info['quantization']} (the export's type)"
            raise EncdecError(f"CTranslate2 cannot compute in {wanted} on {device}: "
                              f"{' '.join(str(error).split())}") from error
        if kind == "cpu" and self.precision.startswith("int8"):  # asked for, or the type an int8 export stored
            note_if_int8_is_slower(self.name, self.config)

    @classmethod
    def load(cls, model_dirs: Sequence[str | os.PathLike], quantize: str | None = None, dtype: str | None = None,
             device: str = "cpu") -> tuple[CTranslate2Engine, PreTrainedTokenizerBase]:
        """The folder of ``model_dirs`` (one), written by ``encdec export``, with the tokenizer exported beside it."""
        engine = cls(model_dirs[0], quantize=quantize, dtype=dtype, device=device)
        return engine, engine.tokenizer

    @property
    def precision(self) -> str:
        """What it computes in, as CTranslate2 reports it (e.g. ``int8_float32`` for int8 on a CPU)."""
        return self.translator.compute_type

    def options(self, settings: dict[str, Any], budget: int) -> dict[str, Any]:
        """``generate()`` settings as ``translate_batch`` options, unset ones taken from the model's generation
        config, then transformers' defaults, as ``generate()`` takes them, with the config's banned sequences and
        forced ``</s>`` (module docstring); a one-line error for any it lacks."""
        settings = {key: value for key, value in settings.items() if key != "forced_bos_token_id"}  # a prefix
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
        # generate()'s NoBadWordsLogitsProcessor, which never bans </s> alone
        banned = [list(ids) for ids in getattr(self.generation_config, "bad_words_ids", None) or []
                  if list(ids) != [self.config.eos_token_id]]
        if banned:
            options["suppress_sequences"] = [self.tokenizer.convert_ids_to_tokens(ids) for ids in banned]
        # the budget counts the </s>, as max_decoding_length does (less the one generate() forces at its end);
        # sources are never cut (max_input_length 0)
        return {**options, "max_decoding_length": max(budget - 1, 1) if self.forces_eos() else budget,
                "max_input_length": 0}

    def forces_eos(self) -> bool:
        """Whether ``generate()`` forces ``</s>`` as the last token of a budget (transformers'
        ``ForcedEOSTokenLogitsProcessor``, which an imported Marian model's ``forced_eos_token_id`` turns on)."""
        forced = getattr(self.generation_config, "forced_eos_token_id", None)
        if forced is None:
            return False
        if forced not in (self.config.eos_token_id, [self.config.eos_token_id]):
            raise EncdecError(f"The ctranslate2 engine forces the model's </s> ({self.config.eos_token_id}) at the end "
                              f"of a budget, not `forced_eos_token_id`={forced!r}; use --engine torch.")
        return True

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, budget: int,
                 settings: dict[str, Any]) -> list[list[int]]:
        """:return: each output's ids, the start token first, as ``generate()`` returns them; a forced first token
            (``forced_bos_token_id``: a multilingual model's target language) is CTranslate2's ``target_prefix``,
            which its hypotheses hold, as ``generate()``'s outputs hold the forced token after the start token"""
        check_positions(self.config.max_position_embeddings, int(attention_mask.sum(dim=1).max()), budget,
                        "CTranslate2")
        tokens = [self.tokenizer.convert_ids_to_tokens(row[mask.bool()].tolist())
                  for row, mask in zip(input_ids, attention_mask, strict=True)]
        forced = settings.get("forced_bos_token_id")  # a multilingual model's target language: its token first
        prefix = {} if forced is None else {
            "target_prefix": [[self.tokenizer.convert_ids_to_tokens(forced)]] * len(tokens)}
        results = self.translator.translate_batch(tokens, **self.options(settings, budget), **prefix)
        start, eos = self.config.decoder_start_token_id, self.config.eos_token_id
        # CTranslate2 leaves out the </s>; a hypothesis shorter than the budget (which counts the </s>) ended with it,
        # and with forced_eos_token_id every hypothesis ends with it (the budget was one token shorter: options)
        forced = self.forces_eos()
        return [[start, *self.tokenizer.convert_tokens_to_ids(hypothesis[:budget - 1] if forced else hypothesis),
                 *([eos] if forced or len(hypothesis) < budget else [])]
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


__all__ = ["CT2_INSTALL", "CT2_OPTIONS", "CTranslate2Engine", "CTranslate2Missing", "read_export_info",
           "require_ctranslate2"]
