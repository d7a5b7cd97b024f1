"""The interface every inference engine implements (``Engine``), the backend of an engine by name (``engine_spec``:
its declaration in ``encdec.backends``), and the precision check all of them make (``check_precision``)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from transformers import GenerationConfig, PretrainedConfig, PreTrainedTokenizerBase

from ...backends import Backend, engines
from ...errors import EncdecError


def engine_spec(name: str) -> Backend:
    """The backend of the engine ``name`` (``encdec.backends``); a one-line error that lists the engines otherwise."""
    if name not in engines():
        raise EncdecError(f"`engine` must be one of {list(engines())}, got {name!r}.")
    return engines()[name]


class Engine(ABC):
    """What turns a batch of source ids into output ids and scores a given output. ``encdec.inference.decoding``
    decodes through these members alone, the same for every engine. What an engine supports (alignments, ensembles,
    quantize modes, dtypes, model families) is its backend, ``spec``: callers ask it, not the engine's name."""

    name: ClassVar[str]  # its backend's name in encdec.backends
    config: PretrainedConfig  # the model's config: special tokens, positions, sizes
    generation_config: GenerationConfig  # the model's decoding defaults

    @property
    def spec(self) -> Backend:
        """What this engine supports, as its backend declares it."""
        return engine_spec(self.name)

    @classmethod
    @abstractmethod
    def load(cls, model_dirs: Sequence[str | os.PathLike], quantize: str | None = None, dtype: str | None = None,
             device: str = "cpu") -> tuple[Engine, PreTrainedTokenizerBase]:
        """The engine over the folder of ``model_dirs`` (several only where ``spec.ensembles``: an ensemble) and its
        tokenizer, computing with ``quantize`` or ``dtype`` (one of ``spec.quantize``, ``spec.dtypes``)."""

    @property
    @abstractmethod
    def precision(self) -> str:
        """What it computes in (``float32``, ``bfloat16``, ``int8_float32``...), read from what it loaded."""

    @abstractmethod
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, budget: int,
                 settings: dict[str, Any]) -> list[list[int]]:
        """Decode a batch as ``generate()`` does; an option of ``settings`` the engine lacks is refused in one line
        that names it.

        :param input_ids: (B, S) right-padded
        :param budget: the most tokens to generate, ``</s>`` included (``DecodeOptions.budget``; ``generate()`` takes
            it with the settings: ``with_budget``)
        :param settings: ``generate()`` keyword arguments (``DecodeOptions.settings``), the budget apart
        :return: each output's ids, the decoder start token first (``num_return_sequences`` per source, one source
            after the other)
        """

    @abstractmethod
    def teacher_forced(self, source_ids: list[int], target_ids: list[int], alignment: bool = False
                       ) -> tuple[list[float], torch.Tensor | None]:
        """Score one translation: the log-probability of each target token given the source and the tokens before
        it, and with ``alignment`` (where ``spec.alignments``) the (S, T) cross-attention that produced them.

        :param target_ids: the T output tokens, without the decoder start token
        """


def check_precision(spec: Backend, quantize: str | None, dtype: str | None) -> None:
    """``quantize`` and ``dtype`` are among those ``spec`` supports, and not both asked."""
    if quantize is not None and quantize not in spec.quantize:
        raise EncdecError(f"`quantize` must be one of {list(spec.quantize)} (or none), got {quantize!r}.")
    if dtype is not None and dtype not in spec.dtypes:
        raise EncdecError(f"`dtype` must be one of {list(spec.dtypes)} (or none), got {dtype!r}.")
    if quantize and dtype not in (None, "float32"):
        raise EncdecError(f"Choose `quantize`={quantize!r} or `dtype`={dtype!r}, not both: int8 weights compute "
                          "their activations in float32.")


def check_positions(limit: int | None, source_length: int, budget: int, export: str) -> None:
    """An exported Transformer holds ``limit`` positions (``max_position_embeddings``), for sources and targets
    alike (None: no limit): a one-line error for a source or a budget beyond them. ``export``: its name in the
    message (its backend's format)."""
    if limit is None:
        return
    if source_length > limit:
        raise EncdecError(f"A source of {source_length} tokens exceeds the {limit} positions exported to {export} "
                          "(`max_position_embeddings`); shorten it, or translate with truncation.")
    if budget + 1 > limit:  # the decoder start token takes position 0
        raise EncdecError(f"A budget of {budget} new tokens needs {budget + 1} decoder positions; the {export} export "
                          f"has {limit} (`max_position_embeddings`): ask for at most {limit - 1}.")


__all__ = ["Engine", "check_positions", "check_precision", "engine_spec"]
