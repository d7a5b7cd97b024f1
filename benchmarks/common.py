"""What every section shares: the settings, the report's building blocks, the workloads and the measuring.

Machine load drifts while a benchmark runs (other jobs share the cores), so the contenders are timed
interleaved: blocks of a few calls each, the order reversed every round (A B, B A, A B, ...). Both see the
same load on average, and the ratio of two calls timed back to back is what the report leads with.
"""

from __future__ import annotations

import gc
import multiprocessing
import re
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import torch
from torch import nn
from transformers import PreTrainedModel

FIRST_ORDINARY_ID = 3  # ids 0, 1, 2 are pad, bos / decoder start, eos: random tokens never hit them


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


# ---------------------------------------------------------------------------------------------------------------
# Building and counting models


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
# Report text


def count(n: int, noun: str) -> str:
    """``count(1, "step")`` -> "1 step", ``count(3, "step")`` -> "3 steps"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
