"""The package's modules sit in layers: no import cycle between encdec's modules, and no encdec module imported inside
a function to dodge one. The command line alone imports lazily, from a package beside this one (``encdec_cli``), so
that ``encdec --help`` and argument errors answer without importing torch and transformers.

The layers are the stages of the pipeline (``STAGES``): a module's stage is its folder under ``src/encdec``, and a
stage imports only the stages below it. The old flat module names (``encdec.MOVED``) are the new modules."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import encdec

PACKAGE = Path(encdec.__file__).parent
CLI = sorted((PACKAGE.parent / "encdec_cli").glob("*.py"))  # the command line: a package beside encdec


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(node: ast.ImportFrom | ast.Import, importer: str, is_package: bool) -> set[str]:
    """The encdec modules an import statement names (``from .x import y`` -> encdec.x, and encdec.x.y if that is a
    module)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name.split(".")[0] == "encdec"}
    if node.level:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    if target.split(".")[0] != "encdec":
        return set()
    names = {target}
    for alias in node.names:
        candidate = f"{target}.{alias.name}"
        if (PACKAGE.parent / candidate.replace(".", "/")).with_suffix(".py").is_file():
            names.add(candidate)
    return names


def import_graph() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Module-level imports between encdec modules, and the encdec imports made inside functions, per module."""
    graph: dict[str, set[str]] = {}
    lazy: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        graph[name] = set()
        top_level = {id(node) for node in tree.body}
        top_level |= {id(node) for statement in tree.body if isinstance(statement, ast.Try)
                      for node in statement.body}  # a module-level `try: import` (decoding_options.py)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            targets = imported_modules(node, name, is_package) - {name}
            if id(node) in top_level:
                graph[name] |= targets
            elif targets:
                lazy.setdefault(name, []).extend(sorted(targets))
    return graph, lazy


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_walk_sees_the_imports() -> None:
    graph, _ = import_graph()
    assert "encdec.inference" in graph["encdec.inference.evaluation"]
    assert "encdec.models.pipeline_seq2seq" in graph["encdec.folders"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle_between_encdec_modules() -> None:
    graph, _ = import_graph()
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_no_encdec_import_inside_a_function_outside_the_cli() -> None:
    _, lazy = import_graph()
    assert not lazy, lazy


@pytest.mark.parametrize("path", CLI, ids=lambda path: path.name)
def test_the_cli_modules_import_only_the_standard_library_at_the_top(path: Path) -> None:
    """Each module of ``encdec_cli`` imports the standard library and its sibling modules (``from .x import y``)
    at the top, and ``encdec`` only inside the commands."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = {alias.name.split(".")[0] for node in top if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in top
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert top and names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_the_cli_is_a_package_of_several_modules() -> None:
    assert {path.name for path in CLI} >= {"__init__.py", "parser.py", "commands.py", "runner.py"}


@pytest.mark.parametrize("argv", [["--help"], ["translate", "--help"], ["translate"], ["serve", "--port", "x"],
                                  ["nonsense"]], ids=["help", "command-help", "missing-argument", "bad-value",
                                                      "unknown-command"])
def test_help_and_argument_errors_import_neither_torch_nor_transformers(argv: list[str]) -> None:
    code = ("import sys, encdec_cli\n"
            "try:\n    encdec_cli.main(sys.argv[1:])\nexcept SystemExit as done:\n    code = done.code\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'encdec') if m in sys.modules)\n"
            "print(code, heavy)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    expected_code = 0 if argv[-1] == "--help" else 2
    assert done.stdout.strip().splitlines()[-1] == f"{expected_code} []", done.stdout + done.stderr


def test_modules_stay_small_enough_to_read() -> None:
    """Every function fits on a screen (50 lines at most), and no file of the package or the command line passes 600
    lines."""
    long_functions = []
    for path in [*sorted(PACKAGE.rglob("*.py")), *CLI]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 50:
                long_functions.append(f"{module_name(path)}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long_functions, long_functions
    long_files = {module_name(path): lines for path in [*PACKAGE.rglob("*.py"), *CLI]
                  if (lines := len(path.read_text(encoding="utf-8").splitlines())) >= 600}
    assert not long_files, long_files


# declared options named by words that mean other things too: the response's `scores` and `alignments`, the
# data recipe's `source_lang` and `target_lang` (its columns), which name a pair's languages wherever pairs are read,
# and DeepL's API's own field `split_sentences` and its stored glossaries (a resource with routes of its own), which
# its adapter (serve/deepl/) names as DeepL does
SHARED_WORDS = {"scores", "alignments", "source_lang", "target_lang", "split_sentences", "glossary"}


def test_a_decoding_option_is_named_in_at_most_three_files() -> None:
    """Options are declared once (``decoding_options``) and read from the declaration: an option's name appears in at
    most three Python files of the package and the command line (the declaration, and the engines that map it)."""
    from encdec.decoding_options import declared

    texts = {path: path.read_text(encoding="utf-8") for path in [*PACKAGE.rglob("*.py"), *CLI]}
    spread = {}
    for name in sorted({item.name for item in declared()} - SHARED_WORDS):
        files = [module_name(path) for path, text in texts.items() if re.search(rf"\b{name}\b", text)]
        if len(files) > 3:
            spread[name] = sorted(files)
    assert spread == {}, spread


def reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    """Every module that ``start`` imports, directly or through others."""
    seen, todo = set(), list(start)
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


# What each stage may import from encdec: its own modules and the stages below it. A module's stage is its folder
# under src/encdec; the modules at the root are the helpers every stage shares ("shared"), and the package itself
# (encdec/__init__.py: the registration with the Auto classes and the top-level names) may import any stage, which
# is why no module imports it (the version is read from encdec.version).
STAGES = {
    "models": {"models"},  # nothing else of encdec: trust_remote_code copies of these files load without the package
    "shared": {"shared", "models"},  # folders.py saves a model through the models' pipeline class
    "chunked": {"shared", "chunked"},  # long jobs run in chunks (streamed, resumable, shared out): for any stage above
    "data": {"shared", "models", "data"},
    "metrics": {"shared", "metrics"},
    "training": {"shared", "models", "data", "metrics", "training"},
    "inference": {"shared", "models", "chunked", "data", "metrics", "inference"},
    "serve": {"shared", "models", "data", "inference", "serve"},
    "ship": {"shared", "models", "data", "inference", "ship"},
    "marian": {"shared", "models", "marian"},  # a trained model arriving: Marian checkpoints as encdec folders
    "recipes": {"shared", "models", "chunked", "data", "metrics", "training", "inference", "serve", "ship",
                "marian", "recipes"},
    "package": {"shared", "models", "chunked", "data", "metrics", "training", "inference", "serve", "ship",
                "marian", "recipes"},
}


def stage_of(module: str) -> str:
    """``encdec.inference.corpus`` -> ``inference``; ``encdec.io_utils`` -> ``shared``; ``encdec`` -> ``package``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return parts[1] if (PACKAGE / parts[1]).is_dir() else "shared"


def imports_across_stages(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every (importer, imported module) pair in which the importer's stage may not import the other's."""
    return sorted((importer, imported) for importer, targets in graph.items() for imported in targets
                  if stage_of(imported) not in STAGES.get(stage_of(importer), ()))


def test_every_module_has_a_stage_in_the_table() -> None:
    graph, _ = import_graph()
    stages = {stage_of(name) for name in graph}
    assert stages == set(STAGES), f"not in the table: {stages - set(STAGES)}; rows unused: {set(STAGES) - stages}"
    assert stage_of("encdec.inference.corpus") == "inference" and stage_of("encdec.io_utils") == "shared"


def test_the_stage_check_names_the_import_that_breaks_it() -> None:
    graph = {"encdec.models.attention": {"encdec.training.run", "encdec.models.compat"},
             "encdec.io_utils": {"encdec.errors", "encdec"},
             "encdec.recipes.demo": {"encdec.training", "encdec.serve"}}
    assert imports_across_stages(graph) == [("encdec.io_utils", "encdec"),
                                            ("encdec.models.attention", "encdec.training.run")]


def test_no_stage_imports_one_above_it() -> None:
    """Models import only models; shared helpers, data and metrics nothing of training, inference, serving or
    shipping; training and inference not each other; serving and shipping not training; only the recipes (and the
    package's own ``__init__``) may import every stage."""
    graph, _ = import_graph()
    offending = imports_across_stages(graph)
    assert not offending, "\n".join(f"{importer} ({stage_of(importer)}) imports {imported} ({stage_of(imported)})"
                                     for importer, imported in offending)


def test_models_and_data_reach_nothing_above_them() -> None:
    """Models and data import nothing from training, inference, serving, shipping or the recipes, not even through
    another module; the training package's own modules import their siblings, never the package."""
    graph, _ = import_graph()
    below = {name for name in graph if stage_of(name) in ("models", "data")}
    assert below and "encdec.training.run" in graph
    above = {"training", "inference", "serve", "ship", "recipes", "package"}
    assert not {name for name in reachable(graph, below) if stage_of(name) in above}
    inside = {name for name in graph if name.startswith("encdec.training.")}
    assert not {name for name in inside if "encdec.training" in graph[name]}
