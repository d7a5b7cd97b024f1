"""The Markdown of the repository is written for its users: a README that fits a few screens, no internal issue
numbers, no paths that lead outside the repository, and links that lead somewhere."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+\b|\bthe issue\b", re.IGNORECASE)
PARENT_PATH = re.compile(r"(?<![\w./-])(?:\.\./)+[\w.-][\w./-]*")
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|home|root|Users)/[\w./-]+")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    """The Markdown files git tracks or would track (the working tree, ignored files left out)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=REPO,
                            capture_output=True, text=True, check=True, timeout=60).stdout.split()
    return [REPO / name for name in listed if (REPO / name).is_file()]


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_bytes()) < 12_000


def test_the_walk_finds_the_docs() -> None:
    names = {path.relative_to(REPO).as_posix() for path in markdown_files()}
    assert {"README.md", "docs/results.md", "docs/compatibility.md", "model_cards/README.md"} <= names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: path.relative_to(REPO).as_posix())
def test_markdown_names_no_issue_and_no_outside_path(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not ISSUE_NUMBER.findall(text), ISSUE_NUMBER.findall(text)
    outside = [match for match in PARENT_PATH.findall(text)
               if REPO not in [(path.parent / match).resolve(), *(path.parent / match).resolve().parents]]
    assert not outside, outside
    assert not MACHINE_PATH.findall(text), MACHINE_PATH.findall(text)
    for target in LINK.findall(text):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        assert (path.parent / target.split("#")[0]).exists(), f"{path.name}: broken link {target}"


def test_the_checks_catch_what_they_look_for() -> None:
    assert ISSUE_NUMBER.findall("as issue 19 asked, and the issue said") == ["issue 19", "the issue"]
    assert PARENT_PATH.findall("read `../shared/data/multi30k/` or ../README.md") == ["../shared/data/multi30k/",
                                                                                      "../README.md"]
    assert MACHINE_PATH.findall("at /work/main/runs") == ["/work/main/runs"]
