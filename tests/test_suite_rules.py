"""The suite's own rules, checked on its source: the files marked `integration` exist; no test asserts a duration
(speed is measured in scripts/benchmark.py, never asserted: a loaded machine fails such a test, and a hang is caught
better by a timeout); and no test waits on another process without a timeout (a wait, a ``subprocess.run``, or a
read of a child's pipe that blocks until the child writes or ends)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import INTEGRATION_FILES

TESTS = Path(__file__).resolve().parent
CLOCKS = {"time", "monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns", "process_time"}
TIMING_NAMES = {"elapsed", "duration", "took", "wall", "wall_s", "seconds", "runtime"}
ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def timing_reads(node: ast.AST) -> list[str]:
    """What in ``node`` reads a clock (``time.monotonic()``...) or names a timing (``elapsed``, ``.seconds()``...)."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in CLOCKS \
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "time":
            found.append(f"time.{sub.func.attr}()")
        elif isinstance(sub, ast.Name) and sub.id.lower() in TIMING_NAMES:
            found.append(sub.id)
        elif isinstance(sub, ast.Attribute) and sub.attr.lower() in TIMING_NAMES:
            found.append(f".{sub.attr}")
    return found


def is_deadline(node: ast.AST) -> bool:
    """``deadline`` in a comparison: a loop's hang guard (a timeout), not a measured duration."""
    return any(isinstance(sub, ast.Name) and "deadline" in sub.id.lower() for sub in ast.walk(node))


def duration_assertions(source: str) -> list[str]:
    """Each ``assert`` that bounds a clock reading or a timing (``<``, ``<=``, ``>``, ``>=``), as 'line: names'.
    A comparison with a deadline is a hang guard and passes; an exact equality (a count, a faked clock) passes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        names = [name for compare in ast.walk(node.test)
                 if isinstance(compare, ast.Compare) and any(isinstance(op, ORDERINGS) for op in compare.ops)
                 and not is_deadline(compare) for name in timing_reads(compare)]
        if names:
            found.append(f"{node.lineno}: {', '.join(names)}")
    return found


SUBPROCESS_CALLS = {"run", "check_output", "check_call", "call"}
WAITS = {"communicate", "wait"}
PIPE_READS = {"read", "readline", "readlines"}


def untimed_waits(source: str) -> list[str]:
    """Each call that can block on another process forever, as 'line: call': ``subprocess.run`` (and friends),
    ``communicate()`` or ``wait()`` without ``timeout=``, and a read of a child's ``stdout``/``stderr`` pipe (read
    it from a thread into a queue, and ``get(timeout=...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        timed = any(keyword.arg == "timeout" for keyword in node.keywords)
        if name in SUBPROCESS_CALLS and isinstance(owner, ast.Name) and owner.id == "subprocess" and not timed:
            found.append(f"{node.lineno}: subprocess.{name}")
        elif name in WAITS and not timed and not (name == "wait" and node.args):
            found.append(f"{node.lineno}: {name}()")
        elif name in PIPE_READS and isinstance(owner, ast.Attribute) and owner.attr in {"stdout", "stderr"}:
            found.append(f"{node.lineno}: {owner.attr}.{name}()")
    return found


def test_the_integration_files_exist() -> None:
    assert {path.name for path in TESTS.glob("test_*.py")} >= INTEGRATION_FILES


def test_no_test_asserts_a_duration() -> None:
    offenders = {path.name: found for path in sorted(TESTS.glob("*.py"))
                 if (found := duration_assertions(path.read_text(encoding="utf-8")))}
    assert not offenders, offenders


def test_the_duration_check_sees_what_it_looks_for() -> None:
    assert duration_assertions("t0 = time.monotonic()\nassert time.monotonic() - t0 < 5\n") == ["2: time.monotonic()"]
    assert duration_assertions("assert elapsed < 300\nassert lines == 3\n") == ["1: elapsed"]
    assert duration_assertions("assert 100.0 <= run.seconds() < 160.0\n") == ["1: .seconds"]
    assert duration_assertions("assert time.monotonic() < deadline\nassert run.seconds() == 12.0\n") == []


def test_every_wait_on_another_process_has_a_timeout() -> None:
    offenders = {path.name: found for path in sorted(TESTS.glob("*.py"))
                 if (found := untimed_waits(path.read_text(encoding="utf-8")))}
    assert not offenders, offenders


def test_the_wait_check_sees_what_it_looks_for() -> None:
    source = ("subprocess.run(['x'])\nsubprocess.run(['x'], timeout=60)\np.communicate()\np.wait(timeout=5)\n"
              "line = p.stdout.readline()\nitems.get(timeout=5)\n")
    assert untimed_waits(source) == ["1: subprocess.run", "3: communicate()", "5: stdout.readline()"]
