"""`encdec import` measured on a Marian model of OPUS-MT's size built here: import time and memory, exactness against
MarianMTModel and MarianTokenizer, encdec's engines against MarianMTModel, and the browser site's size.

    python scripts/benchmark_marian_import.py                  # Multi30k from ../shared/data/multi30k (about 7 min
                                                               # on 2 CPU cores), rewrites docs/import.md's "Measured"
    python scripts/benchmark_marian_import.py --quick --output -   # a tiny model, a smoke run, printed

Writes the section "## Measured" of docs/import.md (replaced where it exists, else appended; ``--output -`` prints
it instead): the machine and the command, then the tables. Needs sentencepiece (the ``dev`` extra) to train the
tokenizer and for MarianTokenizer, ctranslate2 and onnxruntime (``encdec[ct2]``, ``encdec[onnx]``), and the built
browser runtime (``make web``). benchmarks/marian_import.py holds the method.
"""

from __future__ import annotations

import argparse
import logging
import re
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: benchmarks/ is not installed

from benchmarks.marian_import import MULTI30K, QUICK_SETTINGS, ImportSettings, marian_import  # noqa: E402
from benchmarks.report import environment_lines, render_section  # noqa: E402
from encdec.io_utils import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "import.md"
HEADING = "## Measured"


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = ImportSettings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=MULTI30K,
                        help=f"a Multi30k folder (train.de/en, test2016.de/en; default {MULTI30K}); the built-in "
                             "date data where it has none")
    parser.add_argument("--quick", action="store_true", help="a tiny model and 1 timed call: a smoke run")
    parser.add_argument("--repeats", type=int, help=f"timed calls per engine and workload (default {defaults.repeats})")
    parser.add_argument("--keep", type=Path, help="build the folders here (new) and keep them")
    parser.add_argument("--output", default=str(DOC),
                        help=f"the markdown file whose '{HEADING}' section is written, or - to print it "
                             f"(default: {DOC})")
    return parser.parse_args(argv)


def write_section(output: str, section: str) -> None:
    """``section`` in place of the file's ``## Measured`` section (up to the next ``## `` heading), else at its end."""
    text = Path(output).read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    if match:
        text = f"{text[:match.start()]}{section.strip()}\n\n{text[match.end():]}"
    else:
        text = f"{text.rstrip()}\n\n{section.strip()}"
    atomic_write_text(output, text.rstrip() + "\n")


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    transformers.logging.set_verbosity_error()  # generate()'s note on every call: max_new_tokens over max_length
    settings = QUICK_SETTINGS if args.quick else ImportSettings()
    if args.repeats is not None:
        settings = replace(settings, repeats=args.repeats)
    if args.keep:
        args.keep.mkdir(parents=True)
    start = time.perf_counter()
    section = marian_import(settings, args.data, args.keep)
    command = shlex.join(["python", "scripts/benchmark_marian_import.py", *argv])
    machine = "\n".join(environment_lines(command) + [f"- Run time: {(time.perf_counter() - start) / 60:.1f} min"])
    text = render_section(replace(section, method=f"{machine}\n\n{section.method}"))
    if args.output == "-":
        print(text)
        return
    write_section(args.output, text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
