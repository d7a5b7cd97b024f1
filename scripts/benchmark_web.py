"""Translation in the browser: the site of a model (``encdec export --format web``) measured in headless Chromium.

    python scripts/benchmark_web.py runs/multi30k-transformer-fast      # test2016, first 200 lines
    python scripts/benchmark_web.py MODEL_DIR --sentences FILE --limit 0 --quantize float32

Prints a markdown table (docs/fast-inference.md, "Translation in the browser"): what the site weighs and what the
page fetched, the time to the first translation after the page loads, greedy and beam-5 sentences a second, and
how many greedy lines read as `encdec translate`'s. Needs the built runtime (`make web`) and Chromium with
chromedriver. benchmarks/web.py holds the method.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: benchmarks/ is not installed

from benchmarks.web import benchmark_web, markdown  # noqa: E402

TEST2016 = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "multi30k" / "test2016.de"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a model folder")
    parser.add_argument("--sentences", type=Path, default=TEST2016,
                        help=f"source sentences, one a line (default: {TEST2016})")
    parser.add_argument("--limit", type=int, default=200, help="the first N lines (0: all)")
    parser.add_argument("--quantize", choices=["int8", "float32"], default="int8")
    parser.add_argument("--site", type=Path, default=None, help="keep the exported site here (a new folder)")
    args = parser.parse_args()
    lines = [line for line in args.sentences.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = lines[:args.limit] if args.limit else lines
    figures = benchmark_web(args.model, lines, args.quantize, args.site)
    print(markdown(figures, args.model.name, args.quantize))


if __name__ == "__main__":
    main()
