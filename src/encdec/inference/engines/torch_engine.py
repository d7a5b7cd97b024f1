"""The torch engine: a model's own ``generate()``, in float32, in bfloat16 (``dtype="bfloat16"``) or with the linear
and LSTM/GRU layers in dynamic int8 (``quantize="int8"``); over one model folder or an ensemble of several."""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ...decoding_options import with_budget
from ..model_loading import load_ensemble, load_model_and_tokenizer
from .int8 import note_if_int8_is_slower
from .interface import Engine, check_precision


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


class TorchEngine(Engine):
    """A model's own ``generate()``: every option of it works."""

    name = "torch"

    def __init__(self, model: PreTrainedModel, quantize: str | None = None, dtype: str | None = None) -> None:
        check_precision(self.spec, quantize, dtype)
        if quantize == "int8":
            if model.device.type == "cpu":  # where dynamic int8 runs, and what was measured
                note_if_int8_is_slower(self.name, model.config)
            model = quantize_int8(model)  # a copy
        elif dtype == "bfloat16":
            model = copy.deepcopy(model).to(torch.bfloat16)  # the caller's model stays as it is
        self.model = model.eval()
        self.config = model.config
        self.generation_config = model.generation_config

    @classmethod
    def load(cls, model_dirs: Sequence[str | os.PathLike], quantize: str | None = None, dtype: str | None = None,
             device: str = "cpu") -> tuple[TorchEngine, PreTrainedTokenizerBase]:
        """A model folder, or several as an ensemble (``load_ensemble``)."""
        if len(model_dirs) > 1:
            model, tokenizer = load_ensemble(list(model_dirs), device)
        else:
            model, tokenizer = load_model_and_tokenizer(model_dirs[0], device)
        return cls(model, quantize=quantize, dtype=dtype), tokenizer

    @property
    def precision(self) -> str:
        """What the model computes in, read from the model rather than from the options asked for (a quantization
        that did nothing shows): ``int8_float32`` when dynamic int8 layers replaced its linear layers (int8 weights
        and matrix products, the rest in float32), else its weights' dtype."""
        if any(isinstance(module, torch.ao.nn.quantized.dynamic.Linear) for module in self.model.modules()):
            return "int8_float32"
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, budget: int,
                 settings: dict[str, Any]) -> list[list[int]]:
        """:param input_ids: (B, S) right-padded :return: each output's ids (num_return_sequences per source)"""
        device = self.model.device
        with torch.inference_mode():
            generated = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                            **with_budget(settings, budget))  # (B x n, 1 + T)
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


__all__ = ["TorchEngine", "alignment_matrix", "quantize_int8"]
