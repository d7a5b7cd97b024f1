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


# --- docs/architecture.md names every module ------------------------------------------------------------------------
# Its tree (the first fenced block under "## The tree") names each file by the folders above it: a line is an indent,
# then entries separated by two spaces, then a description; an entry is a path relative to the folder of the nearest
# less-indented folder entry above it (a top-level entry, relative to the repository root). A folder entry ends in
# "/". What must be there: every module of src/ (.py), the server's page (src/**/*.html), and the browser runtime's
# sources (web/src/*.js, web/*.mjs, web/*.html).
ARCHITECTURE = REPO / "docs" / "architecture.md"
TREE_ENTRY = re.compile(r"[\w.-]+(?:/[\w.-]+)*(?:/|\.(?:py|js|mjs|html))")
NAMED_SOURCES = ("src/*.py", "src/*.html", "web/src/*.js", "web/*.mjs", "web/*.html")


def tree_paths(markdown: str) -> set[str]:
    """The repository paths the tree of ``markdown`` names (see above)."""
    block = markdown.split("## The tree", 1)[1].split("```", 2)[1]
    paths, folders = set(), []  # folders: (indent, path) of the folder entries that enclose the current line
    for line in block.splitlines()[1:]:
        indent = len(line) - len(line.lstrip(" "))
        folders = [(depth, folder) for depth, folder in folders if depth < indent]
        parent = folders[-1][1] if folders else ""
        for entry in line.strip().split("  "):
            if not TREE_ENTRY.fullmatch(entry):
                break
            paths.add(parent + entry)
            if entry.endswith("/"):
                folders.append((indent, parent + entry))
    return paths


def sources_to_name() -> set[str]:
    """The files the tree must name: git's tracked and untracked-not-ignored files (no built bundle, no cache)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *NAMED_SOURCES],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=60).stdout.split()
    return {name for name in listed if (REPO / name).is_file()}


def test_the_architecture_tree_names_every_module() -> None:
    """A module added, moved or removed without its line in docs/architecture.md's tree fails here, naming it."""
    named, present = tree_paths(ARCHITECTURE.read_text(encoding="utf-8")), sources_to_name()
    missing = sorted(present - named)
    stale = sorted(path for path in named if path.startswith(("src/", "web/")) and not (REPO / path).exists())
    assert not missing and not stale, ("docs/architecture.md's tree is out of date. Missing (add a line under its "
                                       f"folder): {missing}. Stale (named, but no such file): {stale}")


def test_the_tree_reader_follows_indentation() -> None:
    tree = ("## The tree\n\n```\nsrc/pkg/                 the package\n  __init__.py  cli.py     two files\n"
            "  sub/                   a folder\n    a.py                 continued on\n"
            "                         the next line, a.py not read again\n  b.py  prose words\n"
            "web/  x.mjs  text\n  y.js  inside web/\n```\n")
    assert tree_paths(tree) == {"src/pkg/", "src/pkg/__init__.py", "src/pkg/cli.py", "src/pkg/sub/",
                                "src/pkg/sub/a.py", "src/pkg/b.py", "web/", "x.mjs", "web/y.js"}
