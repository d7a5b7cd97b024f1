"""Time the models of the working tree against those of an earlier git revision, in one process, paired: every RNN
variant and the Transformer at the benchmark's dimensions.

    python scripts/compare_revisions.py --base cf54b8a             # every model: training, greedy, beam 5
    python scripts/compare_revisions.py --base HEAD~1 --repeats 21

`scripts/benchmark.py` measures absolute figures; run twice, before and after a change, they differ by a few percent
from the machine's load alone. Here both versions of each model run in the same process with the same weights, their
calls alternating, and the headline is the median of the paired ratios (working tree / base throughput), as in the
benchmark's RNN section. The base revision's model files are read with `git show` and imported as a separate
package: they import only single-dot siblings (they are what `save_pretrained` copies), so they load like remote code.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: benchmarks/ is not installed
from benchmarks.common import (  # noqa: E402
    BenchmarkSettings,
    make_generate,
    make_train_step,
    paired_ratios,
    seeded,
    time_interleaved,
)
from benchmarks.rnn import RNN_VARIANTS, RNNDims, build_rnn  # noqa: E402
from benchmarks.transformer import TransformerDims, build_encdec_transformer  # noqa: E402

MODELS_DIR = "src/encdec/models"


def import_base_models(revision: str, into: Path):
    """The ``models`` package of ``revision``, importable as ``encdec_base_models``."""
    package = into / "encdec_base_models"
    package.mkdir()
    listing = subprocess.run(["git", "ls-tree", "--name-only", f"{revision}:{MODELS_DIR}"], check=True,
                             capture_output=True, text=True).stdout.split()
    for name in listing:
        if name.endswith(".py"):
            source = subprocess.run(["git", "show", f"{revision}:{MODELS_DIR}/{name}"], check=True,
                                    capture_output=True, text=True).stdout
            (package / name).write_text(source)
    sys.path.insert(0, str(into))
    return importlib.import_module("encdec_base_models")


def same_weights(new: torch.nn.Module, old: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``new``'s weights under ``old``'s names: matched by position, since a revision may have renamed some (both
    register them in the same order; every shape must agree)."""
    ours, theirs = new.state_dict(), old.state_dict()
    if len(ours) != len(theirs) or any(a.shape != b.shape for a, b in zip(ours.values(), theirs.values(), strict=True)):
        raise SystemExit(f"The two revisions' models hold different weights:\n  {list(ours)}\n  {list(theirs)}")
    return dict(zip(theirs, ours.values(), strict=True))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the git revision to compare the working tree with")
    parser.add_argument("--repeats", type=int, default=15, help="timed calls of each version per workload")
    parser.add_argument("--threads", type=int, default=BenchmarkSettings().threads, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings, dims = BenchmarkSettings(), RNNDims()
    with tempfile.TemporaryDirectory() as tmp:
        base = import_base_models(args.base, Path(tmp))
        print(f"working tree vs {args.base}: throughput ratio, median of {args.repeats} paired calls (IQR); "
              "> 1 means the working tree is faster\n")
        print(f"| Model | Training | Generation, greedy | Generation, beam {settings.num_beams} |")
        print("|---|---:|---:|---:|")
        builds = {variant.label: (lambda v=variant: build_rnn(dims, v), "RNNSeq2Seq") for variant in RNN_VARIANTS}
        builds["Transformer"] = (lambda: build_encdec_transformer(TransformerDims()), "TransformerSeq2Seq")
        for label, (build, prefix) in builds.items():
            new = seeded(build, settings.seed)
            config = getattr(base, f"{prefix}Config")(**new.config.to_diff_dict())
            old = getattr(base, f"{prefix}ForConditionalGeneration")._from_config(
                config, attn_implementation=new.config._attn_implementation)
            old.load_state_dict(same_weights(new, old))
            print(f"| {label} | " + " | ".join(compare(new, old, settings, args.repeats)) + " |", flush=True)


def compare(new: torch.nn.Module, old: torch.nn.Module, settings: BenchmarkSettings, repeats: int) -> list[str]:
    """Training, greedy and beam-search throughput of ``new`` over ``old``: paired median (IQR)."""
    cells = []
    for make in (make_train_step, lambda m, s: make_generate(m, s, 1), lambda m, s: make_generate(m, s, s.num_beams)):
        new_times, old_times = time_interleaved([make(new, settings), make(old, settings)], warmup=2,
                                                repeats=repeats, block=1)
        median, q1, q3 = paired_ratios(old_times, new_times)
        cells.append(f"{median:.3f} ({q1:.3f}-{q3:.3f})")
    return cells


if __name__ == "__main__":
    main(sys.argv[1:])
