"""The README's tour runs as written on the demo models: this test reads its commands from README.md and runs each
one, in order, in a folder where ``encdec demo`` has just written ``runs/demo-*`` (shortened to a few steps) and the
repository's ``configs/`` is linked in, as in a checkout after ``make demo``. Bash runs the first command (the
``encdec`` on the PATH), every one that needs more of the shell than a glob and redirections (a pipe, a variable)
and every one that is not ``encdec`` (torchrun); the others run in this process, ``encdec``'s ``main`` given the words
bash would give it (a glob expanded as bash expands it, into the sorted paths it matches), ``<``'s file as standard
input and standard output written to ``>``'s file, which spares a start of torch and transformers each.

Three commands cannot run verbatim here, and each is changed as little as it can be: training runs a few steps
(``--training.max_steps``) in place of the recipe's hundreds; ``encdec serve`` listens on a free port (``--port 0``)
and is stopped once it answers; ``encdec push`` runs in this process against a fake Hub (the two network calls of
``HfApi`` replaced, as in test_hub.py), since tests have no network.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from encdec_cli import main
from test_demo import assert_serves
from test_hub import fake_hub, uploaded  # noqa: F401 (a fixture)

README = Path(__file__).resolve().parents[1] / "README.md"
SHORT_TRAINING = ["--training.max_steps", "4", "--training.eval_steps", "2", "--training.logging_steps", "2"]


def tour_commands(readme: str) -> list[str]:
    """The commands of the README's tour: its ``bash`` block, comments dropped, ``\\`` continuations joined."""
    section = readme[readme.index("## A tour"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()  # a comment starts at " #" (no command here has one inside)
        if command:
            commands.append(" ".join(command.split()))
    return commands


def test_the_tour_is_read_from_the_readme() -> None:
    commands = tour_commands(README.read_text())
    assert len(commands) >= 12
    assert all(command.split()[0] in {"encdec", "torchrun"} for command in commands), commands
    assert commands[0].startswith("encdec data ") and "encdec push " in commands[-1]


def shortened(command: str) -> str:
    """The command as the test runs it: training a few steps."""
    return f"{command} {shlex.join(SHORT_TRAINING)}" if " train " in f" {command} " else command


def run_bash(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def needs_bash(command: str, index: int) -> bool:
    return index == 0 or not command.startswith("encdec ") or any(sign in command for sign in "|;&$?[")


def redirected(words: list[str], sign: str, cwd: Path) -> tuple[Path | None, list[str]]:
    """The file of ``sign FILE`` (``<`` or ``>``) in ``words``, if any, and the words without it."""
    if sign not in words:
        return None, words
    at = words.index(sign)
    return cwd / words[at + 1], words[:at] + words[at + 2:]


def expanded(words: list[str], cwd: Path) -> list[str]:
    """``words`` as bash passes them on: a word with ``*`` replaced by the paths it matches from ``cwd``, sorted (a
    word that matches nothing stays as it is)."""
    return [path for word in words
            for path in ((sorted(glob.glob(word, root_dir=cwd)) or [word]) if "*" in word else [word])]


def run_here(command: str, cwd: Path, monkeypatch, capsys) -> subprocess.CompletedProcess:
    """``command`` (``encdec ...``, perhaps with a glob, ``< FILE`` or ``> FILE``) run by ``main`` in this process,
    from ``cwd``: the outcome as bash's would be."""
    stdin, words = redirected(shlex.split(command), "<", cwd)
    stdout, words = redirected(words, ">", cwd)
    words = expanded(words, cwd)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    with open(stdin if stdin else os.devnull, encoding="utf-8") as source:
        monkeypatch.setattr(sys, "stdin", source)
        status = main(words[1:])
    out, err = capsys.readouterr()
    if stdout:
        stdout.write_text(out, encoding="utf-8")
        out = ""
    return subprocess.CompletedProcess(words, status, out, err)


def test_every_tour_command_runs_as_written(demo_workspace, fake_hub, monkeypatch, capsys) -> None:  # noqa: F811
    root = demo_workspace
    bin_dir = str(Path(sys.executable).parent)  # the venv's `encdec` and `torchrun`
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    test_lines = None
    for index, command in enumerate(tour_commands(README.read_text())):
        words = shlex.split(command)
        if words[:2] == ["encdec", "serve"]:
            assert_serves([sys.executable, "-m", "encdec", *words[1:]], cwd=root, env=env)
            continue
        if words[:2] == ["encdec", "push"]:
            monkeypatch.chdir(root)
            assert main(words[1:]) == 0, command
            repo_id = words[words.index("--repo-id") + 1]
            assert "model.safetensors" in uploaded(fake_hub, repo_id), command
            continue
        if needs_bash(command, index):
            done = run_bash(shortened(command), root, env)
        else:
            done = run_here(shortened(command), root, monkeypatch, capsys)
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, f"{command}\n{done.stderr[-3000:]}"
        test_lines = check_output(command, words, done, root, test_lines)


def check_output(command: str, words: list[str], done: subprocess.CompletedProcess, root: Path,
                 test_lines: list[str] | None) -> list[str] | None:
    """What each kind of command must have made (beyond exiting 0). Returns the test split's lines, once written."""
    if words[:2] == ["encdec", "data"]:
        output = root / words[words.index("--output") + 1]
        sources = (output / "test.src").read_text().splitlines()
        assert len(sources) == len((output / "test.tgt").read_text().splitlines()) > 0
        return sources
    assert test_lines is not None, "the tour must write the data before it uses it"
    if words[:2] == ["encdec", "translate"] and "--n-best" in words:
        k = int(words[words.index("--n-best") + 1])
        rows = [line.split(" ||| ") for line in done.stdout.splitlines()]
        assert all(len(row) == 4 for row in rows), rows[:3]  # ID ||| TEXT ||| SCORE ||| ALIGNMENT
        by_line: dict[int, list[list[str]]] = {}
        for row in rows:
            by_line.setdefault(int(row[0]), []).append(row)
        assert sorted(by_line) == list(range(len(test_lines)))
        for hypotheses in by_line.values():
            assert 1 <= len(hypotheses) <= k
            scores = [float(row[2]) for row in hypotheses]
            assert scores == sorted(scores, reverse=True)
            assert len({row[1] for row in hypotheses}) == len(hypotheses)  # no duplicate strings
    elif words[:2] == ["encdec", "translate"]:
        text = (root / words[-1]).read_text() if ">" in words else done.stdout
        assert len(text.splitlines()) == len(test_lines)
    elif words[:2] == ["encdec", "evaluate"]:
        results = json.loads(done.stdout[done.stdout.index("{"):])
        assert 0 <= results["bleu"] <= 100 and "nrefs:1" in results["bleu_signature"], results
    elif words[:2] == ["encdec", "average"]:
        assert (root / words[words.index("--output") + 1] / "model.safetensors").is_file()
    elif words[:2] == ["encdec", "export"]:
        exported = {"ctranslate2": "model.bin", "onnx": "encdec_onnx.json"}[words[words.index("--format") + 1]]
        assert (root / words[words.index("--output") + 1] / exported).is_file()
    elif "train" in words:
        output = root / words[words.index("--training.output_dir") + 1]
        assert (output / "model.safetensors").is_file()
        assert len(list((output / "checkpoints").glob("checkpoint-*"))) >= 2  # enough for `encdec average`
    else:
        pytest.fail(f"the tour has a command this test does not check: {command}")
    return test_lines
