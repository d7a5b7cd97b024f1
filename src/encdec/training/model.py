"""A new model from a run config: its configuration (JSON + the tokenizer's vocabulary and special ids), the
generation defaults it ships with, and the checks made before training (position table, post-LN warm-up)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from transformers import AutoConfig, AutoModelForSeq2SeqLM, GenerationConfig, PreTrainedModel

from ..decoding_options import positions_needed
from ..errors import EncdecError
from ..io_utils import require_file
from ..tokenization import check_tokenizer_matches_model, special_token_ids
from .config import GenerationSettings, RunConfig, TrainingSettings


def build_model_config(config: RunConfig, tokenizer) -> Any:
    """Model hyper-parameters from the JSON file, vocabulary size and special-token ids from the tokenizer."""
    path = require_file(config.model, "model config")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise EncdecError(f"{path} is not valid JSON: {error}") from None
    model_type = values.pop("model_type", None)
    if model_type is None:
        raise EncdecError(f"{path} has no `model_type`; use \"transformer_seq2seq\" or \"rnn_seq2seq\".")
    values.update(config.model_overrides)
    ids = special_token_ids(tokenizer)
    for key, value in ids.items():
        if key in values and values[key] != value:
            raise EncdecError(f"{path} sets `{key}`={values[key]} but the tokenizer has {value}; remove the key, "
                              "the model takes it from the tokenizer.")
    values.update(ids)
    try:
        return AutoConfig.for_model(model_type, **values)
    except ValueError as error:
        raise EncdecError(f"{path}: {error}") from None


def build_model(model_config, generation: GenerationSettings, tokenizer) -> PreTrainedModel:
    """A new model of ``model_config``, checked against the tokenizer, with the run's generation defaults."""
    model = AutoModelForSeq2SeqLM.from_config(model_config)
    check_tokenizer_matches_model(tokenizer, model.config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=model_config.decoder_start_token_id, bos_token_id=model_config.bos_token_id,
        eos_token_id=model_config.eos_token_id, pad_token_id=model_config.pad_token_id,
        **dataclasses.asdict(generation),  # the run's generation section: every option a model saves as its default
    )
    return model


def check_positions(config: RunConfig, model_config) -> None:
    """Learned positions cannot extrapolate: refuse, before training, lengths the position table cannot hold."""
    if getattr(model_config, "position_embedding_type", None) != "learned":
        return
    limit, s = model_config.max_position_embeddings, config.training
    lengths = {f"training.max_source_length={s.max_source_length}": s.max_source_length,
               f"training.max_target_length={s.max_target_length}": s.max_target_length,
               **positions_needed(config.generation)}
    too_long = [name for name, length in lengths.items() if length > limit]
    if too_long:
        raise EncdecError(f"The model has learned positions with max_position_embeddings={limit}, too few for "
                          f"{', '.join(too_long)}: lower them to fit, or raise max_position_embeddings.")


# the shortest warm-up with which a deep post-LN Transformer trained in our Multi30k checks (docs/results.md)
POST_LN_SAFE_WARMUP = 4000


def post_ln_warmup_warning(model_config: Any, settings: TrainingSettings) -> str | None:
    """A warning for a post-LN Transformer of 6 or more layers with a warm-up under POST_LN_SAFE_WARMUP steps, else
    None. Post-LN (Vaswani et al. 2017) needs its warm-up (Liu et al. 2020, "Understanding the Difficulty of Training
    Transformers"): on Multi30k our 6+6 post-LN model with a 400-step warm-up stalled at 9.6 val BLEU after 6,000
    steps (pre-LN: 36.7), and trained to 38.2 with a 4,000-step warm-up."""
    if getattr(model_config, "model_type", None) != "transformer_seq2seq" or model_config.normalize_before:
        return None
    layers = max(model_config.encoder_layers, model_config.decoder_layers)
    if layers < 6 or settings.warmup_steps >= POST_LN_SAFE_WARMUP:
        return None
    return (f"a post-LN Transformer with {layers} layers and a {settings.warmup_steps}-step warm-up: deep post-LN "
            f"models stall with short warm-ups (on Multi30k a 6+6 model with 400 steps reached 9.6 val BLEU, with "
            f"4,000 steps 38.2). Set `training.warmup_steps` to {POST_LN_SAFE_WARMUP} or more, or use pre-LN "
            "(`normalize_before: true` in the model config); see docs/results.md, 'Post-LN stability'.")
