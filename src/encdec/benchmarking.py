"""Speed and memory of encdec's models against transformers' reference implementations, on CPU.

Each comparison builds both models at identical dimensions and random initialisation, then measures:

* training throughput: target tokens/s of one optimisation step (forward with labels, backward, AdamW step);
* generation throughput: new tokens/s of ``generate()`` (greedy and beam search) with a fixed output length;
* peak memory: the rise of the resident set size over a few training steps (or one beam search), each model
  in a fresh process.

Machine load drifts while a benchmark runs (other jobs share the cores), so the contenders are timed
interleaved: blocks of a few calls each, the order reversed every round (A B, B A, A B, ...). Both see the
same load on average, and the ratio ours / reference is what the report leads with.

The report is a list of [`Section`]s; each comparison is a function ``BenchmarkSettings -> Section`` in
[`SECTIONS`], so another model family adds its own section without touching the others.
"""

from __future__ import annotations

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
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import MarianConfig, MarianMTModel, PreTrainedModel

from .models import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration

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
    generation_repeats: int = 11  # timed generate() calls per model and decoding mode
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


QUICK_SETTINGS = replace(
    BenchmarkSettings(), train_warmup=1, train_steps=2, train_block=1, generation_warmup=1,
    generation_repeats=1, memory_steps=1,
)


@dataclass(frozen=True)
class Section:
    """One ``## title`` part of the report: what was compared, how, and the figures as a markdown table."""

    title: str
    method: str
    table: str


@dataclass(frozen=True)
class Row:
    """One metric measured for our model and for the reference model."""

    metric: str
    ours: float
    reference: float
    better: str  # "higher", "lower", "equal" (a sanity check) or "info" (storage differs by design)
    decimals: int = 0
    spread: tuple[float, float] | None = None  # quartiles of the ratio over calls timed side by side


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
    """Tokens/s from the median call time of each contender, with the quartiles of the paired ratios.

    The k-th calls of both contenders ran in the same round, close in time, so ``reference_k / ours_k`` is a
    throughput ratio under (nearly) the same load; its quartiles show how much of the ratio is noise.
    """
    ours, reference = times
    ratios = [r / o for o, r in zip(ours, reference, strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return Row(metric, tokens / statistics.median(ours), tokens / statistics.median(reference), "higher",
               spread=(q1, q3))


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
        Row(f"Peak RSS increase, {settings.memory_steps} training steps, MiB", *train, "lower", decimals=1),
        Row(f"Peak RSS increase, one beam-{settings.num_beams} generate(), MiB", *beam, "lower", decimals=1),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Report


def format_table(rows: Sequence[Row], ours_name: str, reference_name: str) -> str:
    """Markdown table with the ratio ours / reference and which direction is better."""
    lines = [
        f"| Metric | {ours_name} | {reference_name} | ours / reference | paired ratio, IQR | better |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        ratio = row.ours / row.reference if row.reference else float("nan")
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


SECTIONS: dict[str, Callable[[BenchmarkSettings], Section]] = {
    "transformer": transformer_vs_marian,
}


def common_method(settings: BenchmarkSettings) -> str:
    """How every section measures, in prose, with the settings of this run."""
    s = settings
    return (
        f"- **Training**: batch {s.train_batch}, {s.source_length} source and {s.target_length} target tokens "
        f"(random ids >= {FIRST_ORDINARY_ID}, no padding); one step = forward with labels + backward + AdamW step. "
        f"{s.train_warmup} warm-up steps, then the median of {s.train_steps} timed steps per model; "
        f"tokens/s = batch x target length / median step time.\n"
        f"- **Generation**: batch {s.generation_batch}, source length {s.source_length}, exactly {s.new_tokens} "
        f"new tokens (`min_new_tokens = max_new_tokens = {s.new_tokens}`, so EOS cannot end a sentence early), "
        f"`torch.inference_mode()`, greedy and beam {s.num_beams}. {s.generation_warmup} warm-up call(s), then the "
        f"median of {s.generation_repeats} timed calls; tokens/s = batch x {s.new_tokens} / median call time "
        f"(beam search too counts only the batch's output tokens, not every hypothesis).\n"
        f"- **Interleaving**: both models are timed in the same process, alternating blocks "
        f"({s.train_block} training step(s) or 1 generate call per block, the order reversed every round), so a "
        f"change in machine load hits both alike. The ratio column divides the medians; the IQR column gives the "
        f"25-75 % quartiles of the ratios of the k-th calls of both models, which ran side by side, as a gauge of "
        f"noise. torch runs {s.threads} intra-op thread(s): on a shared machine "
        f"more threads than idle cores make times swing several-fold. Read the ratio column: absolute figures "
        f"move with load.\n"
        f"- **Peak memory**: each model and workload runs in a freshly spawned process. After the model and its "
        f"inputs (and, for training, the optimizer) are built, the RSS is read (`VmRSS`), the kernel's peak counter "
        f"is reset (`/proc/self/clear_refs` = 5), the workload runs ({s.memory_steps} training steps, or one "
        f"beam-{s.num_beams} `generate()`), and the report gives peak RSS (`VmHWM`) minus that baseline. "
        f"It covers activations, gradients, AdamW state (created at the first step) and allocator overhead, "
        f"but not the weights themselves."
    )


def environment_lines(command: str) -> list[str]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"- Date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
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


def render_report(sections: Sequence[Section], settings: BenchmarkSettings, command: str, quick: bool) -> str:
    """The whole markdown document: environment and method, then one ``##`` heading per section."""
    parts = [
        "# Benchmarks",
        "Generated by `scripts/benchmark.py` (`make benchmark`); edit the code, not this file. "
        "Ratios are encdec / reference: above 1 is better for tokens/s, below 1 is better for memory.",
    ]
    if quick:
        parts.append("> **Quick smoke run**: too few repeats for the figures to mean anything.")
    parts += ["## Environment", "\n".join(environment_lines(command)), "## Method", common_method(settings)]
    for section in sections:
        parts += [f"## {section.title}", section.method, section.table]
    return "\n\n".join(parts) + "\n"


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
    """Run the named sections, write the report to ``output`` (when given) and return it."""
    torch.set_num_threads(settings.threads)
    sections = []
    for name in section_names:
        logger.info("section %r", name)
        sections.append(SECTIONS[name](settings))
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
    "render_report",
    "run_benchmarks",
    "time_interleaved",
    "write_atomically",
]
