"""Fetch Multi30k De-En (train 29,000 / val 1,014 / test2016 1,000 pairs) into data/multi30k, where the recipes in
configs/multi30k-*.yaml read it. The data is for research use only and stays out of the repository (data/ is
ignored by git).

    python scripts/fetch_multi30k.py                          # download from github.com/multi30k/dataset
    python scripts/fetch_multi30k.py --from /path/to/multi30k  # link a copy already on this machine
"""

from __future__ import annotations

import argparse
from pathlib import Path

from encdec.data.fetch import fetch_multi30k

REPO_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="copy_from", default=None,
                        help="a folder holding train/val/test2016 .de/.en files: link them instead of downloading")
    parser.add_argument("--output", default=str(REPO_ROOT / "data" / "multi30k"), help="default: data/multi30k")
    args = parser.parse_args()
    print(f"Multi30k De-En in {fetch_multi30k(args.output, args.copy_from)}")


if __name__ == "__main__":
    main()
