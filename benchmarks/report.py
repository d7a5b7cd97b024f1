"""The report: the sections to run, the environment and method around them, and docs/benchmarks.md.

The report is a list of [`Section`]s; each comparison is a function ``BenchmarkSettings -> Section`` in
[`SECTIONS`], so another model family adds its own section without touching the others. Running only some
sections keeps the others from the existing report (see [`merge_sections`]), each under its own dated line.
"""

from __future__ import annotations

import datetime
import logging
import os
import platform
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch
import transformers

from encdec.io_utils import atomic_write_text

from .batching import batching
from .common import FIRST_ORDINARY_ID, BenchmarkSettings, Section, count
from .corpus import corpus
from .data_scale import data_scale
from .distillation import distillation
from .engines import engines
from .multi30k_engines import multi30k_engines
from .rnn import rnn_family
from .serve import serve
from .student_shapes import student_shapes
from .threads import threads
from .transformer import transformer_vs_marian

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT = Path("docs/benchmarks.md")

SECTIONS: dict[str, Callable[[BenchmarkSettings], Section | None]] = {
    "transformer": transformer_vs_marian,
    "rnn": rnn_family,
    "engines": engines,
    "multi30k_engines": multi30k_engines,  # skipped (its earlier table kept) without the data and trained models
    "serve": serve,
    "threads": threads,
    "corpus": corpus,  # the Multi30k rows need the trained Transformer and the data
    "data": data_scale,  # corpora of 100k to 5M pairs (Multi30k repeated when it is there)
    "batching": batching,  # max_tokens against group_by_length on Multi30k (skipped without the data)
    "student_shapes": student_shapes,  # CTranslate2 beam speed of fast-student shapes (skipped without Multi30k)
    "distillation": distillation,  # the distilled Multi30k students (skipped without the data and trained models)
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


def run_benchmarks(section_names: Sequence[str], settings: BenchmarkSettings, command: str,
                   output: Path | None, quick: bool = False) -> str:
    """Run the named sections, write the report to ``output`` (when given) and return it.

    Running every section in [`SECTIONS`] writes the report afresh. Running only some of them merges them into
    ``output`` where it exists: its other sections stay, each under its own dated *Measured* line.
    """
    torch.set_num_threads(settings.threads)
    sections: list[Section | str] = []
    ran = set()
    for name in section_names:
        logger.info("section %r", name)
        section = SECTIONS[name](settings)
        if section is None:  # its inputs are absent here: an earlier report's table stays
            continue
        ran.add(name)
        sections.append(replace(section, measured=measured_line(utc_now(), command)))
    if output is not None and output.exists() and ran != set(SECTIONS):
        logger.info("partial run: keeping the other sections of %s", output)
        sections = merge_sections(sections, output.read_text())
    report = render_report(sections, settings, command, quick)
    if output is not None:
        atomic_write_text(output, report)
        logger.info("wrote %s", output)
    return report
