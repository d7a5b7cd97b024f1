"""Translation in the browser: the site of a model (``encdec export --format web``) measured in headless Chromium.

    python scripts/benchmark_web.py runs/multi30k-transformer-fast      # test2016, first 200 lines
    python scripts/benchmark_web.py MODEL_DIR --sentences FILE --limit 0 --quantize float32

Writes a markdown table between ``<!-- begin: web -->`` and ``<!-- end: web -->`` of docs/fast-inference.md
("Translation in the browser"; ``--output -`` prints it instead): what the site weighs and what the page fetched,
the time to the first translation after the page loads, greedy and beam-5 sentences a second, and how many greedy
lines read as `encdec translate`'s (torch, and the site's own graphs in ONNX Runtime). Needs the built runtime
(`make web`) and Chromium with chromedriver. benchmarks/web.py holds the method.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: benchmarks/ is not installed

from benchmarks.web import benchmark_web, markdown  # noqa: E402
from encdec.io_utils import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEST2016 = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.de"
DOC = ROOT / "docs" / "fast-inference.md"
BEGIN, END = "<!-- begin: web -->", "<!-- end: web -->"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a model folder")
    parser.add_argument("--sentences", type=Path, default=TEST2016,
                        help=f"source sentences, one a line (default: {TEST2016})")
    parser.add_argument("--limit", type=int, default=200, help="the first N lines (0: all)")
    parser.add_argument("--quantize", choices=["int8", "float32"], default="int8")
    parser.add_argument("--site", type=Path, default=None, help="keep the exported site here (a new folder)")
    parser.add_argument("--output", default=str(DOC),
                        help=f"the markdown file whose web section is rewritten, or - to print it (default: {DOC})")
    args = parser.parse_args()
    lines = [line for line in args.sentences.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = lines[:args.limit] if args.limit else lines
    figures = benchmark_web(args.model, lines, args.quantize, args.site)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    section = (f"Measured {stamp} on {platform.processor() or platform.machine()} by `python scripts/benchmark_web.py "
               f"{args.model.name}` (headless Chromium, one WebAssembly thread, the first {len(lines)} lines of "
               f"{args.sentences.name}):\n\n{markdown(figures, args.model.name, args.quantize)}\n")
    if args.output == "-":
        print(section)
        return
    text = Path(args.output).read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{args.output} has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    atomic_write_text(args.output, f"{head}{BEGIN}\n{section}{END}{rest.split(END, 1)[1]}")
    print(section)


if __name__ == "__main__":
    main()
