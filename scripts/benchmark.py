"""Benchmark encdec's models against transformers' references and write docs/benchmarks.md.

    python scripts/benchmark.py                   # every section, rewrites the report (about 7 min on 2 CPU cores)
    python scripts/benchmark.py --sections rnn    # one section; the report keeps the others from its last run
    python scripts/benchmark.py --quick --output /tmp/benchmarks.md   # smoke run

Sections: `transformer` (encdec's Transformer vs transformers' MarianMTModel), `rnn` (the LSTM encoder-decoder
with every attention type: absolute figures, fused vs token-by-token training, per-step generation cost), `engines`
(torch float32/int8/bfloat16 and CTranslate2 against MarianMTModel), `multi30k_engines` (the trained Multi30k
models on test2016 per engine, end to end; skipped, keeping its earlier table, without the data and the models) and
`serve` (`encdec serve` with and without dynamic batching at 1, 8 and 32 concurrent clients) and `threads` (every
core against encdec's thread choice, on an idle machine and with one core busy) and `corpus` (`encdec translate` of
10k to 1M lines, one and two processes, with peak memory; the Multi30k training sources at beam 5), `data`
(training data of 100k to 5M pairs), `batching` (batches by tokens against group_by_length), `student_shapes`
(CTranslate2 beam speed of the shapes a fast student could take) and `distillation` (the distilled Multi30k students
against their teacher on torch and CTranslate2 int8; skipped without them).
A run of every section writes the report from scratch. A run of some sections replaces those in the existing
report and keeps the others as they were, each under its own dated "Measured" line.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: benchmarks/ is not installed
from benchmarks.common import QUICK_SETTINGS, BenchmarkSettings  # noqa: E402
from benchmarks.report import DEFAULT_OUTPUT, SECTIONS, run_benchmarks  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = BenchmarkSettings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke mode: 1-2 timed repeats; writes only when --output is given")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"markdown report to write (default: {DEFAULT_OUTPUT}, none with --quick)")
    parser.add_argument("--sections", nargs="+", choices=sorted(SECTIONS), default=list(SECTIONS),
                        help="sections to run (default: all, which rewrites the report; a subset is merged into "
                             "the existing report, whose other sections are kept)")
    parser.add_argument("--train-warmup", type=int, help=f"un-timed training steps (default {defaults.train_warmup})")
    parser.add_argument("--train-steps", type=int, help=f"timed training steps (default {defaults.train_steps})")
    parser.add_argument("--generation-warmup", type=int,
                        help=f"un-timed generate() calls (default {defaults.generation_warmup})")
    parser.add_argument("--generation-repeats", type=int,
                        help=f"timed generate() calls (default {defaults.generation_repeats})")
    parser.add_argument("--memory-steps", type=int,
                        help=f"training steps in the memory measurement (default {defaults.memory_steps})")
    parser.add_argument("--rnn-train-steps", type=int,
                        help=f"timed training steps per RNN variant (default {defaults.rnn_train_steps})")
    parser.add_argument("--rnn-generation-repeats", type=int,
                        help=f"timed generate() calls per RNN variant (default {defaults.rnn_generation_repeats})")
    parser.add_argument("--threads", type=int, help=f"torch intra-op threads (default {defaults.threads})")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> BenchmarkSettings:
    base = QUICK_SETTINGS if args.quick else BenchmarkSettings()
    overrides = {name: getattr(args, name) for name in
                 ("train_warmup", "train_steps", "generation_warmup", "generation_repeats", "memory_steps",
                  "rnn_train_steps", "rnn_generation_repeats", "threads")
                 if getattr(args, name) is not None}
    return replace(base, **overrides)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    output = args.output if args.output is not None or args.quick else DEFAULT_OUTPUT
    command = shlex.join(["python", "scripts/benchmark.py", *argv])
    print(run_benchmarks(args.sections, settings_from(args), command, output, quick=args.quick))


if __name__ == "__main__":
    main(sys.argv[1:])
