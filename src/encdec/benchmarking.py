"""Speed and memory of encdec's models against transformers' reference implementations, on CPU.

Each comparison builds both models at identical dimensions and random initialisation, then measures:

* training throughput: target tokens/s of one optimisation step (forward with labels, backward, AdamW step);
* generation throughput: new tokens/s of ``generate()`` (greedy and beam search) with a fixed output length;
* peak memory: the rise of the resident set size over a few training steps (or one beam search), each model
  in a fresh process.

A family with no reference in transformers (the RNN encoder-decoder) reports absolute figures instead, with
ratios within the family (fused vs token-by-token decoder training; per-token cost of long vs short generation).

Machine load drifts while a benchmark runs (other jobs share the cores), so the contenders are timed
interleaved: blocks of a few calls each, the order reversed every round (A B, B A, A B, ...). Both see the
same load on average, and the ratio ours / reference is what the report leads with.

The report is a list of [`Section`]s; each comparison is a function ``BenchmarkSettings -> Section`` in
[`SECTIONS`], so another model family adds its own section without touching the others. Running only some
sections keeps the others from the existing report (see [`merge_sections`]), each under its own dated line.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import gc
import logging
import multiprocessing
import os
import platform
import re
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import MarianConfig, MarianMTModel, PreTrainedModel

from .models import (
    RNNSeq2SeqConfig,
    RNNSeq2SeqForConditionalGeneration,
    TransformerSeq2SeqConfig,
    TransformerSeq2SeqForConditionalGeneration,
)

logger = logging.getLogger(__name__)

FIRST_ORDINARY_ID = 3  # ids 0, 1, 2 are pad, bos / decoder start, eos: random tokens never hit them
DEFAULT_OUTPUT = Path("docs/benchmarks.md")


@dataclass(frozen=True)
class BenchmarkSettings:
    """How much to measure. The workload shapes are part of the report, so runs stay comparable."""

    train_warmup: int = 3  # un-timed training steps per model before timing
    train_steps: int = 30  # timed training steps per model (the median is reported)
    train_block: int = 4  # consecutive steps of one model before switching to the other
    generation_warmup: int = 1  # un-timed generate() calls per model and decoding mode
    generation_repeats: int = 15  # timed generate() calls per model and decoding mode
    memory_steps: int = 3  # training steps run in the fresh process that measures peak memory
    train_batch: int = 64  # sentence pairs per training step
    source_length: int = 24  # source tokens per sentence (random ids, no padding)
    target_length: int = 24  # target tokens per sentence (random ids, no padding)
    generation_batch: int = 32  # source sentences per generate() call
    new_tokens: int = 32  # exactly this many tokens are generated (min_new_tokens = max_new_tokens)
    num_beams: int = 5  # beam width of the beam-search row
    seed: int = 0  # seeds the initialisation of both models and the random batches
    # torch intra-op threads. 1 because the machine is shared: with 2 threads on 2 busy cores, OpenMP barriers
    # made single training steps swing between 0.5 and 4.3 s (vs 0.84-1.12 s with 1 thread)
    threads: int = 1
    # The RNN section times six variants (and the Transformer's per-step reference) round-robin, one call each per
    # round, so fewer repeats per model keep the whole run within a few minutes
    rnn_train_steps: int = 10  # timed training steps per RNN variant (after `train_warmup` un-timed ones)
    rnn_generation_repeats: int = 7  # timed generate() calls per RNN variant and workload
    per_step_tokens: tuple[int, int] = (16, 64)  # greedy lengths whose per-token costs are compared


QUICK_SETTINGS = replace(
    BenchmarkSettings(), train_warmup=1, train_steps=2, train_block=1, generation_warmup=1,
    generation_repeats=1, memory_steps=1, rnn_train_steps=2, rnn_generation_repeats=1,
)


@dataclass(frozen=True)
class Section:
    """One ``## title`` part of the report: what was compared, how, and the figures as a markdown table."""

    title: str
    method: str
    table: str
    measured: str = ""  # "_Measured <date> UTC by `<command>`._", set when the section has run


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


def seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Build a model from a fixed seed, so that both contenders start from the same RNG state."""
    torch.manual_seed(seed)
    return build()


def parameter_counts(model: nn.Module) -> tuple[int, int, int]:
    """(trainable, frozen, buffer) element counts; tied parameters are counted once."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return trainable, frozen, sum(b.numel() for b in model.buffers())


# ---------------------------------------------------------------------------------------------------------------
# Workloads: each returns a zero-argument callable that does one unit of work (one step, one generate call)


def random_ids(batch: int, length: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """(batch, length) ordinary token ids: never pad, start or EOS, so there is no padding and no early stop."""
    return torch.randint(FIRST_ORDINARY_ID, vocab_size, (batch, length), generator=generator)


def make_train_step(model: PreTrainedModel, settings: BenchmarkSettings) -> Callable[[], None]:
    """One optimisation step on a fixed random batch: forward with labels, backward, AdamW step."""
    generator = torch.Generator().manual_seed(settings.seed)
    vocab_size = model.config.vocab_size
    input_ids = random_ids(settings.train_batch, settings.source_length, vocab_size, generator)  # (B, S)
    labels = random_ids(settings.train_batch, settings.target_length, vocab_size, generator)  # (B, T)
    attention_mask = torch.ones_like(input_ids)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()

    def step() -> None:
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def make_generate(model: PreTrainedModel, settings: BenchmarkSettings, num_beams: int) -> Callable[[], None]:
    """One ``generate()`` call producing exactly ``settings.new_tokens`` tokens per sentence."""
    generator = torch.Generator().manual_seed(settings.seed + 1)
    input_ids = random_ids(settings.generation_batch, settings.source_length, model.config.vocab_size, generator)
    attention_mask = torch.ones_like(input_ids)
    model.eval()

    def generate() -> None:
        with torch.inference_mode():
            output = model.generate(
                input_ids=input_ids, attention_mask=attention_mask, do_sample=False, num_beams=num_beams,
                min_new_tokens=settings.new_tokens, max_new_tokens=settings.new_tokens,  # EOS is masked until then
            )
        if output.shape != (settings.generation_batch, 1 + settings.new_tokens):  # start token + new tokens
            raise RuntimeError(f"generate() returned shape {tuple(output.shape)}; the token count would be wrong.")

    return generate


def make_beam_generate(model: PreTrainedModel, settings: BenchmarkSettings) -> Callable[[], None]:
    return make_generate(model, settings, settings.num_beams)


# ---------------------------------------------------------------------------------------------------------------
# Measuring


def time_interleaved(calls: Sequence[Callable[[], None]], warmup: int, repeats: int, block: int) -> list[list[float]]:
    """Seconds of each of ``repeats`` timed calls per contender, timed in interleaved blocks.

    Every contender first runs ``warmup`` un-timed calls. Then each round runs ``block`` calls of every contender,
    in reversed order every other round (A B, B A, ...), so that a change of machine load hits all alike.
    """
    for call in calls:
        for _ in range(warmup):
            call()
    times: list[list[float]] = [[] for _ in calls]
    round_index = 0
    while any(len(t) < repeats for t in times):
        order = range(len(calls)) if round_index % 2 == 0 else reversed(range(len(calls)))
        for i in order:
            for _ in range(min(block, repeats - len(times[i]))):
                start = time.perf_counter()
                calls[i]()
                times[i].append(time.perf_counter() - start)
        round_index += 1
    return times


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


def _rss_kib(field: str) -> int:
    """``VmRSS`` (current) or ``VmHWM`` (peak since the last reset) of this process, in KiB (Linux)."""
    with open("/proc/self/status") as status:
        return int(re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE).group(1))


def _reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def peak_rss_increase_mib(
    build: Callable[[], nn.Module],
    workload: Callable[[PreTrainedModel, BenchmarkSettings], Callable[[], None]],
    settings: BenchmarkSettings,
    calls: int,
) -> float:
    """Peak RSS during ``calls`` runs of the workload minus the RSS right after building the model, in MiB.

    Meant to run in a fresh process (see [`in_fresh_process`]): earlier allocations then cannot be reused.
    Where the peak cannot be reset, the lifetime peak (``ru_maxrss``) stands in for it, which may overstate
    the baseline and so understate the increase.
    """
    torch.set_num_threads(settings.threads)
    model = seeded(build, settings.seed)
    run = workload(model, settings)
    gc.collect()
    baseline = _rss_kib("VmRSS")
    if not _reset_peak_rss():
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(calls):
        run()
    return (_rss_kib("VmHWM") - baseline) / 1024


def in_fresh_process(function: Callable[..., float], *args: object) -> float:
    """Run ``function(*args)`` in a newly spawned Python process and return its result."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


# ---------------------------------------------------------------------------------------------------------------
# Comparing two models


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


# ---------------------------------------------------------------------------------------------------------------
# Report


def count(n: int, noun: str) -> str:
    """``count(1, "step")`` -> "1 step", ``count(3, "step")`` -> "3 steps"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
        f"non-persistent buffers and has no logits bias."
    )
    return Section("Transformer vs MarianMTModel", method, format_table(rows, "encdec", "Marian"))


# ---------------------------------------------------------------------------------------------------------------
# The RNN encoder-decoder: transformers has none to compare with, so absolute figures and ratios within the family


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
    over the whole target (``RNNSeq2SeqDecoder.unroll``): the same step function, only the unrolling differs."""
    step = model.model.decoder.step
    fused = step.fused
    step.fused = False
    try:
        yield
    finally:
        step.fused = fused


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


def median_throughput(tokens: int, times: Sequence[float]) -> float:
    return tokens / statistics.median(times)


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float, float]:
    """Median and 25 / 75 % quartiles of ``numerators[k] / denominators[k]``, calls timed back to back.

    Within a family the paired median is the headline ratio: where the load changes between rounds, the ratio
    of two medians can mix calls from different rounds, while each pair saw (nearly) the same load.
    """
    ratios = [n / d for n, d in zip(numerators, denominators, strict=True)]
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return median, q1, q3


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
        "model also trains with `model.model.decoder.step.fused = False` (the same model, optimizer and step "
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


SECTIONS: dict[str, Callable[[BenchmarkSettings], Section]] = {
    "transformer": transformer_vs_marian,
    "rnn": rnn_family,
}


def common_method(settings: BenchmarkSettings) -> str:
    """How every section measures, in prose, with the settings of this run."""
    s = settings
    training = (
        f"- **Training**: batch {s.train_batch}, {s.source_length} source and {s.target_length} target tokens "
        f"(random ids >= {FIRST_ORDINARY_ID}, no padding); one step = forward with labels + backward + AdamW step. "
        f"{count(s.train_warmup, 'warm-up step')}, then the median of {count(s.train_steps, 'timed step')} per "
        f"model; tokens/s = batch x target length / median step time."
    )
    generation = (
        f"- **Generation**: batch {s.generation_batch}, source length {s.source_length}, exactly {s.new_tokens} "
        f"new tokens (`min_new_tokens = max_new_tokens = {s.new_tokens}`, so EOS cannot end a sentence early), "
        f"`torch.inference_mode()`, greedy and beam {s.num_beams}. {count(s.generation_warmup, 'warm-up call')}, "
        f"then the median of {count(s.generation_repeats, 'timed call')}; tokens/s = batch x {s.new_tokens} / "
        f"median call time (beam search too counts only the batch's output tokens, not every hypothesis)."
    )
    interleaving = (
        f"- **Interleaving and noise**: both models are timed in the same process in alternating blocks "
        f"({count(s.train_block, 'training step')} or 1 generate call per block, the order reversed every round), "
        f"so a change in machine load hits both alike; absolute figures move with load, ratios much less. "
        f"For throughput, `ours / reference` is the median, and `paired ratio, IQR` the 25-75 % quartiles, of "
        f"reference time / our time over the k-th calls of both models, which ran side by side (a ratio of two "
        f"medians could mix calls from rounds under different load); an IQR that spans 1.000 means the two are "
        f"tied within the noise of this run. Counts and memory divide ours by the reference. torch runs "
        f"{count(s.threads, 'intra-op thread')}: on a shared machine, more threads than idle cores made single "
        f"steps swing several-fold."
    )
    memory = (
        f"- **Peak memory**: each model and workload runs in a freshly spawned process. After the model and its "
        f"inputs (and, for training, the optimizer) are built, the RSS is read (`VmRSS`), the kernel's peak counter "
        f"is reset (`/proc/self/clear_refs` = 5), the workload runs ({count(s.memory_steps, 'training step')}, or "
        f"one beam-{s.num_beams} `generate()`), and the report gives peak RSS (`VmHWM`) minus that baseline. "
        f"It covers activations, gradients, AdamW state (created at the first step) and allocator overhead, "
        f"but not the weights themselves."
    )
    return "\n".join([training, generation, interleaving, memory])


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


def environment_lines(command: str) -> list[str]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"- Date (UTC): {utc_now()}",
        f"- torch {torch.__version__}, transformers {transformers.__version__}, Python {platform.python_version()}",
        f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores, torch threads {torch.get_num_threads()}",
        f"- Load average (1, 5, 15 min) when the report was written: {load}",
        f"- Command: `{command}`",
    ]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.MULTILINE)
    except OSError:
        match = None
    return match.group(1).strip() if match else (platform.processor() or platform.machine())


def measured_line(date: str, command: str) -> str:
    return f"_Measured {date} UTC by `{command}`._"


def render_section(section: Section) -> str:
    parts = [f"## {section.title}", section.measured, section.method, section.table]
    return "\n\n".join(part for part in parts if part)


def render_report(sections: Sequence[Section | str], settings: BenchmarkSettings, command: str, quick: bool) -> str:
    """The whole markdown document: environment and method, then one ``##`` heading per section.

    A ``str`` among ``sections`` is a section kept, already rendered, from an earlier report (see
    [`merge_sections`]); the environment and method then describe this run only.
    """
    parts = [
        "# Benchmarks",
        "Generated by `scripts/benchmark.py` (`make benchmark`); edit the code, not this file. "
        "Where a section compares against a reference model, ratios are encdec / reference: above 1 is better "
        "for tokens/s, below 1 is better for memory.",
    ]
    if quick:
        parts.append("> **Quick smoke run**: too few repeats for the figures to mean anything.")
    kept = [section.split("\n", 1)[0].removeprefix("## ") for section in sections if isinstance(section, str)]
    if kept:
        ran = [section.title for section in sections if isinstance(section, Section)]
        parts.append(
            f"> Partial run: this command measured {', '.join(ran) or 'nothing'}. Kept unchanged from an earlier "
            f"report: {', '.join(kept)}; each section's *Measured* line gives its date and command, and the "
            "Environment and Method below describe this run."
        )
    parts += ["## Environment", "\n".join(environment_lines(command)), "## Method", common_method(settings)]
    parts += [section if isinstance(section, str) else render_section(section) for section in sections]
    return "\n\n".join(parts) + "\n"


REPORT_HEADINGS = ("Environment", "Method")  # written by every run: never kept from an earlier report


def merge_sections(sections: Sequence[Section], previous_report: str) -> list[Section | str]:
    """The sections of a partial run merged into an earlier report, whose other sections are kept as rendered.

    Sections keep the earlier report's order; a new title goes last. A kept section that has no *Measured*
    line (written before sections carried one) gets one from the earlier report's environment.
    """
    date = re.search(r"^- Date \(UTC\): (.+)$", previous_report, re.MULTILINE)
    command = re.search(r"^- Command: `(.+)`$", previous_report, re.MULTILINE)
    fallback = measured_line(date.group(1) if date else "at an unknown date",
                             command.group(1) if command else "an unknown command")
    new = {section.title: section for section in sections}
    merged: list[Section | str] = []
    for block in re.split(r"^(?=## )", previous_report, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        title = heading.removeprefix("## ").strip()
        if title in REPORT_HEADINGS:
            continue
        if title in new:
            merged.append(new.pop(title))
            continue
        body = body.strip()
        if not body.startswith("_Measured "):
            body = f"{fallback}\n\n{body}"
        merged.append(f"## {title}\n\n{body}")
    return merged + list(new.values())


def write_atomically(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename it over ``path``: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def run_benchmarks(section_names: Sequence[str], settings: BenchmarkSettings, command: str,
                   output: Path | None, quick: bool = False) -> str:
    """Run the named sections, write the report to ``output`` (when given) and return it.

    Running every section in [`SECTIONS`] writes the report afresh. Running only some of them merges them into
    ``output`` where it exists: its other sections stay, each under its own dated *Measured* line.
    """
    torch.set_num_threads(settings.threads)
    sections: list[Section | str] = []
    for name in section_names:
        logger.info("section %r", name)
        section = SECTIONS[name](settings)
        sections.append(replace(section, measured=measured_line(utc_now(), command)))
    if output is not None and output.exists() and set(section_names) != set(SECTIONS):
        logger.info("partial run: keeping the other sections of %s", output)
        sections = merge_sections(sections, output.read_text())
    report = render_report(sections, settings, command, quick)
    if output is not None:
        write_atomically(output, report)
        logger.info("wrote %s", output)
    return report


__all__ = [
    "DEFAULT_OUTPUT",
    "QUICK_SETTINGS",
    "SECTIONS",
    "BenchmarkSettings",
    "Row",
    "Section",
    "compare_models",
    "format_table",
    "merge_sections",
    "render_report",
    "run_benchmarks",
    "time_interleaved",
    "write_atomically",
]
