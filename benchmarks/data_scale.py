"""The data section: what a corpus of 100k, 1M and 5M pairs costs before training starts (encdec.data).

For each size, `encdec train` with the `transformer-small` recipe runs one step on a training set made of the
Multi30k training pairs repeated (generated dates when Multi30k is absent), in a fresh process; the table gives its
wall time (loading, tokenizer training, tokenization, model set-up, one step) and its peak resident memory (the
largest of its processes). Three runs per size:

- *first*: empty `datasets` and tokenization caches;
- *rerun*: the same command in a new output folder (a second seed, say): the trained tokenizer and the tokenized
  corpus come from the cache;
- *rerun, given tokenizer*: `tokenizer.path` names the first run's tokenizer (a new recipe on the same data): only
  the cache is read.

    python scripts/benchmark.py --sections data
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from encdec.data import make_date_pairs

from .common import BenchmarkSettings, Section
from .corpus import MULTI30K_DATA, timed

logger = logging.getLogger(__name__)

SIZES = (100_000, 1_000_000, 5_000_000)
RECIPE = Path("configs/multi30k-transformer-small.yaml")


def write_corpus(folder: Path, pairs: int) -> str:
    """``folder/train.de`` and ``train.en``: ``pairs`` lines, Multi30k's training pairs repeated (or dates);
    returns what they are made of."""
    folder.mkdir(parents=True, exist_ok=True)
    source, target = MULTI30K_DATA / "train.de", MULTI30K_DATA / "train.en"
    if source.is_file() and target.is_file():
        base = list(zip(source.read_text(encoding="utf-8").splitlines(),
                        target.read_text(encoding="utf-8").splitlines(), strict=True))
        made_of = f"Multi30k's {len(base):,} training pairs repeated"
    else:
        base, made_of = make_date_pairs(100_000, seed=0), "generated dates (Multi30k is absent)"
    with open(folder / "train.de", "w", encoding="utf-8") as de, open(folder / "train.en", "w", encoding="utf-8") as en:
        for i in range(pairs):
            s, t = base[i % len(base)]
            de.write(s + "\n")
            en.write(t + "\n")
    return made_of


def train_command(data_dir: Path, output_dir: Path, cache_dir: Path, tokenizer: Path | None) -> list[str]:
    overrides = {"data.data_dir": str(data_dir), "data.splits": "{train: train}", "data.cache_dir": str(cache_dir),
                 "training.output_dir": str(output_dir), "training.max_steps": "1", "training.eval_strategy": "no",
                 "training.average_last": "0", "training.report_to": "none"}
    if tokenizer is not None:
        overrides["tokenizer.path"] = str(tokenizer)
    return [sys.executable, "-m", "encdec", "train", str(RECIPE),
            *[item for key, value in overrides.items() for item in (f"--{key}", value)]]


def data_scale(settings: BenchmarkSettings) -> Section:
    rows, made_of = [], ""
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(root / "hf-datasets")}
        for pairs in SIZES:
            data = root / f"data-{pairs}"
            made_of = write_corpus(data, pairs)
            cache = root / f"cache-{pairs}"
            first = root / f"first-{pairs}"
            runs = (("first", first, None), ("rerun", root / f"rerun-{pairs}", None),
                    ("rerun, given tokenizer", root / f"given-{pairs}", first / "tokenizer"))
            times = {}
            for name, output, tokenizer in runs:
                logger.info("data: %s pairs, %s", f"{pairs:,}", name)
                seconds, rss = timed(train_command(data, output, cache, tokenizer), env)
                times[name] = seconds
                rows.append((pairs, name, seconds, seconds / times["first"], rss))
            subprocess.run(["rm", "-rf", str(data), str(cache), *(str(output) for _, output, _ in runs),
                            str(root / "hf-datasets")], check=True)
    logger.info("data: %.0f s", time.perf_counter() - began)
    return Section("Training data at scale", method_text(made_of), table(rows))


def method_text(made_of: str) -> str:
    return (f"`encdec train {RECIPE}` with one training step, no evaluation and only a training split, on corpora of "
            f"{made_of}, each command a fresh process. Seconds: the whole command (loading into the memory-mapped "
            "`datasets` cache, training the tokenizer, tokenizing on every core, building the model, one step). Peak "
            "RSS: the largest of its processes. *first*: empty caches; *rerun*: the same command in a new output "
            "folder (the trained tokenizer and the tokenized corpus are read from the cache); *rerun, given "
            "tokenizer*: `tokenizer.path` names the first run's tokenizer.")


def table(rows: list[tuple]) -> str:
    lines = ["| Pairs | Run | Seconds | x first | Peak RSS (MiB) |", "|---:|---|---:|---:|---:|"]
    lines += [f"| {pairs:,} | {name} | {seconds:,.1f} | {ratio:.2f} | {rss:,.0f} |"
              for pairs, name, seconds, ratio, rss in rows]
    first = {pairs: rss for pairs, name, _, _, rss in rows if name == "first"}
    if 100_000 in first and 5_000_000 in first:
        lines.append(f"\nPeak RSS of the first run at 5M pairs is {first[5_000_000] / first[100_000]:.2f} x that "
                     "at 100k.")
    return "\n".join(lines)


__all__ = ["data_scale"]
