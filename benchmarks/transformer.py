"""The ``transformer`` section: encdec's Transformer against transformers' ``MarianMTModel`` at identical
dimensions and random initialisation, plus the two-model comparison it is made of, which another family with a
reference model in transformers can reuse.

Each comparison builds both models and measures:

* training throughput: target tokens/s of one optimisation step (forward with labels, backward, AdamW step);
* generation throughput: new tokens/s of ``generate()`` (greedy and beam search) with a fixed output length;
* peak memory: the rise of the resident set size over a few training steps (or one beam search), each model
  in a fresh process.
"""

from __future__ import annotations

import functools
import gc
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transformers import MarianConfig, MarianMTModel, PreTrainedModel

from encdec.models import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration

from .common import (
    BenchmarkSettings,
    Section,
    count,
    in_fresh_process,
    make_beam_generate,
    make_generate,
    make_train_step,
    paired_ratios,
    parameter_counts,
    peak_rss_increase_mib,
    seeded,
    time_interleaved,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Row:
    """One metric measured for our model and for the reference model."""

    metric: str
    ours: float
    reference: float
    better: str  # "higher", "lower", "equal" (a sanity check) or "info" (storage differs by design)
    decimals: int = 0
    spread: tuple[float, float] | None = None  # quartiles of the ratio over calls timed side by side
    ratio: float | None = None  # throughput: the median of those paired ratios; None: ours / reference


# ---------------------------------------------------------------------------------------------------------------
# The models


@dataclass(frozen=True)
class TransformerDims:
    """Dimensions shared by encdec's Transformer and ``MarianMTModel`` (post-LN, ReLU, sinusoidal positions,
    embeddings scaled by sqrt(d_model), one embedding matrix tied three ways)."""

    vocab_size: int = 8000
    d_model: int = 256
    layers: int = 3  # encoder layers = decoder layers
    heads: int = 8
    ffn_dim: int = 512
    dropout: float = 0.1  # active only in training mode; generation runs in eval mode
    max_positions: int = 512

    def config_kwargs(self) -> dict[str, object]:
        """Keyword arguments that mean the same thing in both configs."""
        return {
            "vocab_size": self.vocab_size, "d_model": self.d_model,
            "encoder_layers": self.layers, "decoder_layers": self.layers,
            "encoder_attention_heads": self.heads, "decoder_attention_heads": self.heads,
            "encoder_ffn_dim": self.ffn_dim, "decoder_ffn_dim": self.ffn_dim,
            "activation_function": "relu", "dropout": self.dropout,
            "attention_dropout": 0.0, "activation_dropout": 0.0,
            "max_position_embeddings": self.max_positions, "scale_embedding": True, "tie_word_embeddings": True,
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1,
            "attn_implementation": "sdpa",
        }


def build_encdec_transformer(dims: TransformerDims) -> PreTrainedModel:
    """encdec's ``TransformerSeq2SeqForConditionalGeneration`` (post-LN is its default)."""
    return TransformerSeq2SeqForConditionalGeneration(TransformerSeq2SeqConfig(**dims.config_kwargs()))


def build_marian(dims: TransformerDims) -> PreTrainedModel:
    """transformers' ``MarianMTModel`` configured like ours: shared and tied embeddings, no forced EOS."""
    config = MarianConfig(**dims.config_kwargs(), share_encoder_decoder_embeddings=True, forced_eos_token_id=None)
    return MarianMTModel(config)


# ---------------------------------------------------------------------------------------------------------------
# Comparing two models


def throughput_row(metric: str, tokens: int, times: Sequence[Sequence[float]]) -> Row:
    """Tokens/s from the median call time of each contender; the ratio is the median of the paired ratios.

    The k-th calls of both contenders ran in the same round, close in time, so ``reference_k / ours_k`` is a
    throughput ratio under (nearly) the same load. Their median is the headline ratio (as in the RNN section):
    a ratio of two medians can mix calls from rounds under different load. The quartiles show the noise.
    """
    ours, reference = times
    median, q1, q3 = paired_ratios(reference, ours)
    return Row(metric, tokens / statistics.median(ours), tokens / statistics.median(reference), "higher",
               spread=(q1, q3), ratio=median)


def compare_models(
    ours: Callable[[], PreTrainedModel], reference: Callable[[], PreTrainedModel], settings: BenchmarkSettings
) -> list[Row]:
    """Every row of a comparison: parameter counts, training and generation throughput, peak memory.

    ``ours`` and ``reference`` build a model; they must be picklable (top-level functions or partials of them)
    because memory is measured in fresh processes.
    """
    models = [seeded(ours, settings.seed), seeded(reference, settings.seed)]
    rows = parameter_rows(models)
    rows.append(training_row(models, settings))
    rows.append(generation_row(models, settings, num_beams=1))
    rows.append(generation_row(models, settings, num_beams=settings.num_beams))
    del models
    gc.collect()
    rows.extend(memory_rows(ours, reference, settings))
    return rows


def parameter_rows(models: Sequence[PreTrainedModel]) -> list[Row]:
    ours, reference = (parameter_counts(model) for model in models)
    return [
        Row("Trainable parameters (tied counted once)", ours[0], reference[0], "equal"),
        Row("Non-trainable elements (frozen parameters + buffers)", sum(ours[1:]), sum(reference[1:]), "info"),
    ]


def training_row(models: Sequence[PreTrainedModel], settings: BenchmarkSettings) -> Row:
    logger.info("training: %d warm-up + %d timed steps per model", settings.train_warmup, settings.train_steps)
    steps = [make_train_step(model, settings) for model in models]
    times = time_interleaved(steps, settings.train_warmup, settings.train_steps, settings.train_block)
    return throughput_row("Training, target tokens/s", settings.train_batch * settings.target_length, times)


def generation_row(models: Sequence[PreTrainedModel], settings: BenchmarkSettings, num_beams: int) -> Row:
    name = "greedy" if num_beams == 1 else f"beam {num_beams}"
    logger.info("generation (%s): %d warm-up + %d timed calls per model", name, settings.generation_warmup,
                settings.generation_repeats)
    calls = [make_generate(model, settings, num_beams) for model in models]
    times = time_interleaved(calls, settings.generation_warmup, settings.generation_repeats, block=1)
    return throughput_row(f"Generation, {name}, new tokens/s", settings.generation_batch * settings.new_tokens, times)


def memory_rows(ours: Callable[[], PreTrainedModel], reference: Callable[[], PreTrainedModel],
                settings: BenchmarkSettings) -> list[Row]:
    logger.info("peak memory: one fresh process per model and workload")
    train = [in_fresh_process(peak_rss_increase_mib, build, make_train_step, settings, settings.memory_steps)
             for build in (ours, reference)]
    beam = [in_fresh_process(peak_rss_increase_mib, build, make_beam_generate, settings, 1)
            for build in (ours, reference)]
    return [
        Row(f"Peak RSS increase, {count(settings.memory_steps, 'training step')}, MiB", *train, "lower", decimals=1),
        Row(f"Peak RSS increase, one beam-{settings.num_beams} generate(), MiB", *beam, "lower", decimals=1),
    ]


def format_table(rows: Sequence[Row], ours_name: str, reference_name: str) -> str:
    """Markdown table with the ratio ours / reference and which direction is better."""
    lines = [
        f"| Metric | {ours_name} | {reference_name} | ours / reference | paired ratio, IQR | better |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        ratio = row.ratio if row.ratio is not None else row.ours / row.reference if row.reference else float("nan")
        spread = f"{row.spread[0]:.3f} - {row.spread[1]:.3f}" if row.spread else "-"
        lines.append(f"| {row.metric} | {row.ours:,.{row.decimals}f} | {row.reference:,.{row.decimals}f} "
                     f"| {ratio:.3f} | {spread} | {row.better} |")
    return "\n".join(lines)


def transformer_vs_marian(settings: BenchmarkSettings) -> Section:
    """encdec's Transformer against ``MarianMTModel`` at identical dimensions."""
    dims = TransformerDims()
    rows = compare_models(functools.partial(build_encdec_transformer, dims),
                          functools.partial(build_marian, dims), settings)
    method = (
        f"`TransformerSeq2SeqForConditionalGeneration` against transformers' `MarianMTModel`, both randomly "
        f"initialised from the same seed: vocabulary {dims.vocab_size}, d_model {dims.d_model}, "
        f"{dims.layers}+{dims.layers} layers, {dims.heads} heads, FFN {dims.ffn_dim}, ReLU, post-LN, sinusoidal "
        f"positions, embeddings scaled by sqrt(d_model) and tied three ways, SDPA attention in both, pad/bos/eos/"
        f"decoder-start ids 0/1/2/1, no forced EOS. Dropout {dims.dropout} in training; generation runs in eval "
        f"mode. The trainable parameter counts must match. Marian stores its two sinusoid tables as frozen "
        f"parameters and adds a zero `final_logits_bias` buffer (vocabulary size); encdec stores the tables as "
        f"non-persistent buffers and has no logits bias (`final_logits_bias`, which an imported Marian model "
        f"switches on, is off here)."
    )
    return Section("Transformer vs MarianMTModel", method, format_table(rows, "encdec", "Marian"))
