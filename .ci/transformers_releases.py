"""The transformers releases CI tests: `floor` prints the declared floor (pyproject.toml's `transformers>=X`),
`beyond` prints the newest release the package index serves if it lies beyond the declared upper bound (else
nothing). Run with the project's venv python."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def declared() -> SpecifierSet:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"transformers([^"]+)"', text)
    if not match:
        sys.exit("pyproject.toml declares no transformers range")
    return SpecifierSet(match.group(1))


def floor(spec: SpecifierSet) -> Version:
    floors = [Version(s.version) for s in spec if s.operator == ">="]
    if len(floors) != 1:
        sys.exit(f"pyproject.toml's transformers range {spec} has no single `>=` floor")
    return floors[0]


def newest_served() -> Version | None:
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True,
                          text=True)
    match = re.search(r"transformers \(([^)]+)\)", done.stdout)
    return Version(match.group(1)) if match else None


def main() -> None:
    spec = declared()
    if sys.argv[1:] == ["floor"]:
        release = floor(spec)
        print(f"{release.major}.{release.minor}.{release.micro}")
    elif sys.argv[1:] == ["beyond"]:
        newest = newest_served()
        if newest is not None and newest not in spec and newest > floor(spec):
            print(newest)
    else:
        sys.exit("usage: transformers_releases.py floor|beyond")


if __name__ == "__main__":
    main()
