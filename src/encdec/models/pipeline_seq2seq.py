"""The ``seq2seq-generation`` pipeline: text in, generated text out, for any encoder-decoder model.

transformers v5 removed the ``text2text-generation`` / ``translation`` tasks, and ``text-generation`` mangles
encoder-decoder output, so encdec ships its own task. ``import encdec`` registers it; saving through the pipeline
(``pipe.save_pretrained(dir)``, or ``encdec.folders.save_for_pipeline``) copies this file next to the weights and writes
``custom_pipelines`` into ``config.json``, so ``pipeline(model=dir, trust_remote_code=True)`` finds it on a machine
without encdec. This file is copied next to the weights: it imports only the stdlib, torch and transformers.

Output convention (that of v4's ``Text2TextGenerationPipeline``):

- ``pipe("one text")`` -> ``[{"generated_text": ...}]``, one dict per returned sequence;
- ``pipe(["a", "b"])`` -> ``[{"generated_text": ...}, {"generated_text": ...}]``, one dict per input, when each
  input yields one sequence; with ``num_return_sequences=k > 1`` it is a list of lists of ``k`` dicts, best first.

A multilingual model (its tokenizer has ``language_tokens``, as ``Seq2SeqMultilingualTokenizer``) takes ``src_lang``
and ``tgt_lang``, at construction or per call: ``src_lang`` sets the tokenizer's source language (which stays set;
without it, the tokenizer's own: the model's first language unless set), ``tgt_lang`` forces its token as the first
generated one (``forced_bos_token_id``) and is required. A bilingual model refuses both.

Keyword arguments, at construction or per call:

- ``batch_size``: inputs per ``generate`` call, padded on the tokenizer's ``padding_side`` (right for encdec
  tokenizers, which the RNN family needs);
- ``truncation`` (default ``False``: an over-long source reaches the model, whose error says so);
- ``return_tensors`` (add ``generated_token_ids``), ``return_text``, ``clean_up_tokenization_spaces``;
- everything else (``generate()``'s keyword arguments: the beam size, the budget, sampling and its settings,
  ``num_return_sequences``, ...) goes to ``model.generate``, on top of the model's ``generation_config.json``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Pipeline

_PREPROCESS_KEYS = ("truncation",)
_POSTPROCESS_KEYS = ("return_tensors", "return_text", "clean_up_tokenization_spaces")


class Seq2SeqGenerationPipeline(Pipeline):
    """Generate a target text for each source text with an encoder-decoder model's ``generate()``."""

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    # Generation kwargs are routed by `_sanitize_parameters` itself: the base class's generation plumbing is
    # private and changes between 5.x releases, and this file must run on the loading side's version.
    _pipeline_calls_generate = False

    def __call__(self, inputs: str | list[str], *args: Any, **kwargs: Any) -> list[dict] | list[list[dict]]:
        """Generate for one text or a list of texts; see the module docstring for the output convention. (A
        dataset or generator streams through the base class and yields one list of dicts per input.)"""
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if not isinstance(inputs, list):
            return super().__call__(inputs, *args, **kwargs)
        if not all(isinstance(text, str) for text in inputs):
            raise TypeError("Seq2SeqGenerationPipeline takes a string or a list of strings; the list holds "
                            f"{sorted({type(text).__name__ for text in inputs})}.")
        if not inputs:
            return []
        result = super().__call__(inputs, *args, **kwargs)
        if all(len(per_input) == 1 for per_input in result):
            return [per_input[0] for per_input in result]
        return result

    def _sanitize_parameters(self, **kwargs: Any) -> tuple[dict, dict, dict]:
        preprocess_params = {key: kwargs.pop(key) for key in _PREPROCESS_KEYS if key in kwargs}
        postprocess_params = {key: kwargs.pop(key) for key in _POSTPROCESS_KEYS if key in kwargs}
        languages = {key: kwargs[key] for key in ("src_lang", "tgt_lang") if kwargs.get(key) is not None}
        if languages and not self.languages:
            raise ValueError(f"This model is bilingual (its tokenizer has no language tokens): drop "
                             f"{' and '.join(languages)}.")
        for code in languages.values():
            self.tokenizer.get_lang_token(code)  # an unknown code: one line naming the model's languages
        if "src_lang" in kwargs:
            preprocess_params["src_lang"] = kwargs.pop("src_lang")
        return preprocess_params, kwargs, postprocess_params  # the rest are generate() kwargs (and tgt_lang)

    @property
    def languages(self) -> list[str]:
        """The model's language codes (its tokenizer's ``language_tokens``); [] for a bilingual model."""
        return list(getattr(self.tokenizer, "language_tokens", None) or ())

    def preprocess(self, text: str, truncation: bool = False, src_lang: str | None = None) -> dict[str, torch.Tensor]:
        """One source text -> ``input_ids`` and ``attention_mask`` of shape (1, S); the base class pads batches."""
        if src_lang is not None:
            self.tokenizer.src_lang = src_lang
        encoded = self.tokenizer(text, truncation=truncation, return_tensors="pt")
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def _forward(self, model_inputs: dict[str, torch.Tensor], tgt_lang: str | None = None,
                 **generate_kwargs: Any) -> dict[str, torch.Tensor]:
        if tgt_lang is not None:
            generate_kwargs["forced_bos_token_id"] = self.tokenizer.get_lang_id(tgt_lang)
        elif self.languages and generate_kwargs.get("forced_bos_token_id") is None:
            raise ValueError(f"This model is multilingual ({', '.join(self.languages)}): pass the target language, "
                             f"e.g. pipeline(model=..., tgt_lang={self.languages[-1]!r}) or pipe(text, tgt_lang=...).")
        in_b = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)  # (B * num_return_sequences, T)
        out_b = output_ids.shape[0]
        return {"output_ids": output_ids.reshape(in_b, out_b // in_b, *output_ids.shape[1:])}  # (B, R, T)

    def postprocess(self, model_outputs: dict[str, torch.Tensor], return_tensors: bool = False,
                    return_text: bool = True, clean_up_tokenization_spaces: bool = False) -> list[dict[str, Any]]:
        """(1, R, T) token ids of one input -> R dicts, best first."""
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            record: dict[str, Any] = {}
            if return_tensors:
                record["generated_token_ids"] = output_ids
            if return_text:
                record["generated_text"] = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            records.append(record)
        return records


__all__ = ["Seq2SeqGenerationPipeline"]
