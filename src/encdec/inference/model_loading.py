"""Loading a model folder, or several as an ensemble, with its tokenizer: the folder checked first (a missing or
corrupt file is named) and the tokenizer against the model. Importing encdec registered its classes, which take
precedence over the code files in the folder; ``trust_remote_code=True`` only spares the question transformers would
otherwise ask about those files."""

from __future__ import annotations

import os

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import EncdecError, InputFileError
from ..folders import WEIGHTS_NAME, read_json, read_safetensors_shapes, require_model_folder
from ..progress import quiet_transformers_bars
from ..tokenization import check_tokenizer_matches_model
from .ensemble import EnsembleForSeq2SeqLM, check_same_tokenizer


def load_model_and_tokenizer(model_dir: str | os.PathLike, device: str | torch.device = "cpu"
                             ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A model folder's model (eval mode, on ``device``) and tokenizer, checked against each other."""
    model_dir = require_model_folder(model_dir)
    read_json(model_dir / "config.json", "the model config")
    read_safetensors_shapes(model_dir / WEIGHTS_NAME)  # one clear error for missing or corrupt weights
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    except (OSError, ValueError) as error:
        raise InputFileError(f"Could not load a tokenizer from {model_dir}: {error}") from error
    with quiet_transformers_bars():
        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=True)
    try:
        check_tokenizer_matches_model(tokenizer, model.config)
    except ValueError as error:
        raise EncdecError(f"{model_dir}: {error}") from error
    return model.to(device).eval(), tokenizer


def load_ensemble(model_dirs: list[str | os.PathLike], device: str | torch.device = "cpu"
                  ) -> tuple[EnsembleForSeq2SeqLM, PreTrainedTokenizerBase]:
    """The ensemble (``encdec.inference.ensemble``) of the model folders ``model_dirs``, each loaded and checked as by
    ``load_model_and_tokenizer``, and their shared tokenizer; a one-line error names a member whose tokenizer
    differs."""
    loaded = [load_model_and_tokenizer(model_dir, device) for model_dir in model_dirs]
    check_same_tokenizer([tokenizer for _, tokenizer in loaded], [str(model_dir) for model_dir in model_dirs])
    return EnsembleForSeq2SeqLM([model for model, _ in loaded]).eval(), loaded[0][1]


__all__ = ["load_ensemble", "load_model_and_tokenizer"]
