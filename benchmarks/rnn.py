"""The ``rnn`` section: encdec's RNN encoder-decoder, every attention type. transformers has no RNN
encoder-decoder to compare with, so the section reports absolute figures, with ratios within the family (fused vs
token-by-token decoder training; per-token cost of long vs short generation, encdec's Transformer as reference).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from unittest import mock

import torch
from transformers import PreTrainedModel

from encdec.models import RNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration

from .common import (
    BenchmarkSettings,
    Section,
    count,
    make_generate,
    make_train_step,
    median_throughput,
    paired_ratios,
    parameter_counts,
    random_ids,
    seeded,
    time_interleaved,
)
from .transformer import TransformerDims, build_encdec_transformer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RNNDims:
    """Dimensions shared by every RNN variant of the section."""

    vocab_size: int = 8000
    embedding_dim: int = 256
    hidden_size: int = 512  # the decoder's; each encoder direction is hidden_size // 2 wide, [h_fwd; h_bwd] is 512
    layers: int = 1  # encoder layers = decoder layers
    cell_type: str = "lstm"
    bidirectional_encoder: bool = True
    dropout: float = 0.2  # Luong et al. 2015's; active only in training mode

    def config(self, attention: str, input_feeding: bool | None) -> RNNSeq2SeqConfig:
        return RNNSeq2SeqConfig(
            vocab_size=self.vocab_size, embedding_dim=self.embedding_dim, hidden_size=self.hidden_size,
            encoder_layers=self.layers, decoder_layers=self.layers, cell_type=self.cell_type,
            bidirectional_encoder=self.bidirectional_encoder, attention=attention, input_feeding=input_feeding,
            dropout=self.dropout, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        )


@dataclass(frozen=True)
class RNNVariant:
    """One attention type of the family, with Luong's input feeding on (the config's default) or off."""

    attention: str
    input_feeding: bool | None = None  # None: the config's default, on for the Luong scores, off otherwise

    @property
    def label(self) -> str:
        if not self.attention.startswith("luong"):
            return self.attention
        return f"{self.attention}, {'no ' if self.input_feeding is False else ''}input feeding"

    @property
    def loop_baseline(self) -> bool:
        """Luong without input feeding trains fused; it is also timed token by token, as its own baseline."""
        return self.attention.startswith("luong") and self.input_feeding is False


RNN_VARIANTS = (
    RNNVariant("none"),
    RNNVariant("bahdanau"),
    RNNVariant("luong_dot"),
    RNNVariant("luong_general"),
    RNNVariant("luong_concat"),
    RNNVariant("luong_general", input_feeding=False),
)


def build_rnn(dims: RNNDims, variant: RNNVariant) -> PreTrainedModel:
    """encdec's ``RNNSeq2SeqForConditionalGeneration`` (untied embeddings and output layer, the config default)."""
    return RNNSeq2SeqForConditionalGeneration(dims.config(variant.attention, variant.input_feeding))


@contextlib.contextmanager
def token_by_token(model: PreTrainedModel) -> Iterator[None]:
    """Within the block, the decoder runs its step one target token at a time even where it could run fused
    over the whole target (``RNNSeq2SeqDecoder.unroll``): the same step function, only the unrolling differs.
    ``fused`` is a read-only property of the step's class, derived from the config: it is patched on the class."""
    with mock.patch.object(type(model.model.decoder.step), "fused", property(lambda step: False)):
        yield


def unfused(call: Callable[[], None], model: PreTrainedModel) -> Callable[[], None]:
    """``call`` run under [`token_by_token`]."""

    def run() -> None:
        with token_by_token(model):
            call()

    return run


def loop_logit_difference(model: PreTrainedModel, settings: BenchmarkSettings, atol: float = 1e-5) -> float:
    """Largest |logit difference| between the fused decoder and the token-by-token loop on one training-shaped
    batch, in eval mode (no dropout). Raises where it exceeds ``atol``: the two timings must compute the same."""
    generator = torch.Generator().manual_seed(settings.seed + 2)
    vocab_size = model.config.vocab_size
    input_ids = random_ids(settings.train_batch, settings.source_length, vocab_size, generator)  # (B, S)
    labels = random_ids(settings.train_batch, settings.target_length, vocab_size, generator)  # (B, T)
    model.eval()
    with torch.inference_mode():
        fused = model(input_ids=input_ids, labels=labels).logits  # (B, T, V)
        with token_by_token(model):
            looped = model(input_ids=input_ids, labels=labels).logits
    if not torch.allclose(fused, looped, rtol=0.0, atol=atol):
        raise AssertionError(f"token-by-token logits differ from the fused ones by up to "
                             f"{(fused - looped).abs().max().item():.2e} (> {atol:g}); the timings would not compare")
    return (fused - looped).abs().max().item()


@dataclass(frozen=True)
class RNNFigures:
    """Everything the RNN section measures; the tables are made from it."""

    labels: list[str]  # one per variant
    decoding: list[str]  # how each variant's decoder runs in training: "fused" or "token by token"
    parameters: list[int]  # trainable, counted once
    training: list[float]  # target tokens/s
    greedy: list[float]  # new tokens/s
    beam: list[float]  # new tokens/s
    loop_label: str  # the variant also timed token by token
    loop_training: float  # its target tokens/s with the step loop
    loop_ratio: tuple[float, float, float]  # loop time / fused time: median and quartiles over paired steps
    loop_logit_difference: float
    per_step_labels: list[str]  # the variants, then the Transformer
    per_step_ms: list[tuple[float, float]]  # ms per generation step (whole batch) at the short and long lengths
    per_step_ratio: list[tuple[float, float, float]]  # per-token(long) / per-token(short): median and quartiles


def measure_rnn(dims: RNNDims, transformer_dims: TransformerDims, settings: BenchmarkSettings) -> RNNFigures:
    s = settings
    models = [seeded(functools.partial(build_rnn, dims, variant), s.seed) for variant in RNN_VARIANTS]
    looped = next(i for i, variant in enumerate(RNN_VARIANTS) if variant.loop_baseline)
    difference = loop_logit_difference(models[looped], s)

    logger.info("RNN training: %d warm-up + %d timed steps per variant, and %s token by token",
                s.train_warmup, s.rnn_train_steps, RNN_VARIANTS[looped].label)
    steps = [make_train_step(model, s) for model in models]
    steps.append(unfused(steps[looped], models[looped]))
    train_times = time_interleaved(steps, s.train_warmup, s.rnn_train_steps, block=1)
    del steps  # the optimizers and their state
    gc.collect()
    target_tokens = s.train_batch * s.target_length

    generation = []
    for num_beams in (1, s.num_beams):
        logger.info("RNN generation (%d beam(s)): %d warm-up + %d timed calls per variant", num_beams,
                    s.generation_warmup, s.rnn_generation_repeats)
        calls = [make_generate(model, s, num_beams) for model in models]
        times = time_interleaved(calls, s.generation_warmup, s.rnn_generation_repeats, block=1)
        generation.append([median_throughput(s.generation_batch * s.new_tokens, t) for t in times])

    short, long = s.per_step_tokens
    logger.info("per-step cost: greedy with %d and %d new tokens, every variant and the Transformer", short, long)
    contenders = [*models, seeded(functools.partial(build_encdec_transformer, transformer_dims), s.seed)]
    calls = [make_generate(model, replace(s, new_tokens=n), 1) for model in contenders for n in (short, long)]
    times = time_interleaved(calls, s.generation_warmup, s.rnn_generation_repeats, block=1)
    per_step_ms, per_step_ratio = [], []
    for short_times, long_times in zip(times[0::2], times[1::2], strict=True):
        per_step_ms.append((1000 * statistics.median(short_times) / short, 1000 * statistics.median(long_times) / long))
        per_step_ratio.append(paired_ratios([t / long for t in long_times], [t / short for t in short_times]))

    return RNNFigures(
        labels=[variant.label for variant in RNN_VARIANTS],
        decoding=["fused" if model.model.decoder.step.fused else "token by token" for model in models],
        parameters=[parameter_counts(model)[0] for model in models],
        training=[median_throughput(target_tokens, t) for t in train_times[:-1]],
        greedy=generation[0],
        beam=generation[1],
        loop_label=RNN_VARIANTS[looped].label,
        loop_training=median_throughput(target_tokens, train_times[-1]),
        loop_ratio=paired_ratios(train_times[-1], train_times[looped]),
        loop_logit_difference=difference,
        per_step_labels=[*(f"RNN, {variant.label}" for variant in RNN_VARIANTS), "Transformer (reference)"],
        per_step_ms=per_step_ms,
        per_step_ratio=per_step_ratio,
    )


def format_rnn_tables(figures: RNNFigures, settings: BenchmarkSettings) -> str:
    """Three markdown tables: throughput per variant, fused vs token-by-token training, per-step cost."""
    f, s = figures, settings
    throughput = [
        f"| Variant | Decoder in training | Trainable parameters | Training, target tokens/s "
        f"| Generation, greedy, new tokens/s | Generation, beam {s.num_beams}, new tokens/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in zip(f.labels, f.decoding, f.parameters, f.training, f.greedy, f.beam, strict=True):
        label, decoding, parameters, training, greedy, beam = row
        throughput.append(f"| {label} | {decoding} | {parameters:,} | {training:,.0f} | {greedy:,.0f} | {beam:,.0f} |")

    fused = f.training[f.labels.index(f.loop_label)]
    loop = [
        "| Variant | Fused, target tokens/s | Token by token, target tokens/s | fused / token by token, paired "
        "median | paired ratio, IQR | max \\|logit difference\\| |",
        "|---|---:|---:|---:|---:|---:|",
        f"| {f.loop_label} | {fused:,.0f} | {f.loop_training:,.0f} | {f.loop_ratio[0]:.3f} "
        f"| {f.loop_ratio[1]:.3f} - {f.loop_ratio[2]:.3f} | {f.loop_logit_difference:.1e} |",
    ]

    short, long = s.per_step_tokens
    per_step = [
        f"| Model | Greedy {short} new tokens, ms per token | Greedy {long} new tokens, ms per token "
        f"| per-token {long} / {short}, paired median | paired ratio, IQR | below 2 |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, (short_ms, long_ms), (ratio, q1, q3) in zip(f.per_step_labels, f.per_step_ms, f.per_step_ratio,
                                                            strict=True):
        per_step.append(f"| {label} | {short_ms:.2f} | {long_ms:.2f} | {ratio:.3f} | {q1:.3f} - {q3:.3f} "
                        f"| {'yes' if ratio < 2 else '**no**'} |")
    return "\n\n".join([
        "**Throughput** (absolute: no reference model)", "\n".join(throughput),
        "**Fused vs token-by-token training** (same model, same step function)", "\n".join(loop),
        f"**Per-step generation cost** ({long} vs {short} new tokens)", "\n".join(per_step),
    ])


def rnn_family(settings: BenchmarkSettings) -> Section:
    """encdec's RNN encoder-decoder, every attention type, in absolute figures and ratios within the family."""
    dims, transformer_dims, s = RNNDims(), TransformerDims(), settings
    figures = measure_rnn(dims, transformer_dims, s)
    short, long = s.per_step_tokens
    for label, (ratio, _, _) in zip(figures.per_step_labels, figures.per_step_ratio, strict=True):
        if ratio >= 2:
            logger.warning("%s: a step of a %d-token generation costs %.2fx one of a %d-token generation (limit 2)",
                           label, long, ratio, short)
    direction = "bidirectional " if dims.bidirectional_encoder else ""
    variants = ", ".join(f"`{variant.label}`" for variant in RNN_VARIANTS)
    method = "\n\n".join([
        f"`RNNSeq2SeqForConditionalGeneration`, one model per attention type ({variants}), "
        f"all randomly initialised from the same seed: {dims.cell_type.upper()}, vocabulary {dims.vocab_size}, "
        f"embedding {dims.embedding_dim}, decoder hidden size {dims.hidden_size}, {dims.layers}+{dims.layers} "
        f"layers, {direction}encoder ({dims.hidden_size // 2} per direction), `bridge='last'`, untied embeddings "
        f"and output layer, dropout {dims.dropout} in training; generation runs in eval mode. Workloads as in "
        f"the Method section (batch {s.train_batch}, {s.source_length}+{s.target_length} tokens for training; "
        f"batch {s.generation_batch}, source {s.source_length}, exactly {s.new_tokens} new tokens for generation).",
        "transformers has no RNN encoder-decoder, so there is no reference model: the tables give absolute "
        "figures, which move with machine load, and two ratios within the family, which move much less. "
        f"All variants are timed round-robin in one process (one call of each per round, the order reversed every "
        f"round): {count(s.train_warmup, 'warm-up step')}, then the median of "
        f"{count(s.rnn_train_steps, 'timed training step')}, and {count(s.generation_warmup, 'warm-up call')}, "
        f"then the median of {count(s.rnn_generation_repeats, 'timed generate() call')} per variant and "
        f"workload; tokens/s as in the Method section. No memory rows. The two ratios are paired: each is the "
        f"median (and `paired ratio, IQR` the 25-75 % quartiles) of the ratios of two calls timed back to back "
        f"in the same round, which holds up better than a ratio of medians when the load changes between rounds.",
        "*Decoder in training*: `fused` runs the decoder step once over the whole target (no attention, or Luong "
        "without input feeding: one RNN call, attention for all steps as one batched product); `token by token` "
        "calls the step once per target token (Bahdanau attention reads s_{t-1}; input feeding reads h̃_{t-1}). "
        f"*Fused vs token by token*: the `{figures.loop_label}` "
        "model also trains with its decoder forced to run token by token (the same model, optimizer and step "
        "function, unrolled per token), interleaved with the other variants; before timing, both unrollings "
        "must give the same logits in eval mode (max |difference| <= 1e-5, given in the table). The ratio is "
        "token-by-token step time / fused step time.",
        f"*Per-step cost*: greedy generation of exactly {short} and exactly {long} new tokens (batch "
        f"{s.generation_batch}, source {s.source_length}); ms per token = median call time / new tokens (one "
        f"decoder step for the whole batch, the encoder and generate()'s setup spread over the steps). The "
        f"requirement is time({long}) / {long} < 2 x time({short}) / {short}, i.e. `per-token {long} / {short}` "
        f"below 2, the ratio paired over the {short}- and {long}-token calls of one model timed back to back. An "
        f"RNN step reads a fixed-size state (`RNNSeq2SeqCache`), so its cost does not grow with the prefix; "
        f"encdec's Transformer (the Transformer section's dimensions) is the reference: its KV cache makes each "
        f"step attend over a longer prefix. A ratio below 1 means the fixed costs (encoder, generate()'s setup) "
        f"weigh more on the short call than the longer prefix does on the long one.",
    ])
    return Section("RNN seq2seq", method, format_rnn_tables(figures, s))
