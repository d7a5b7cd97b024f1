"""Corpus-scale translation (encdec.corpus): streaming from a pipe, resuming after kill -9 to the same bytes, two
processes equal to one, refused resumes, and n-best lists, scores and alignments aligned across chunk boundaries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from encdec.cli import main
from encdec.corpus import ChunkFile, difference, paired_chunks
from encdec.data import make_date_pairs
from encdec.errors import EncdecError
from encdec.io_utils import count_lines
from test_distributed import launch
from tiny_model_folders import DATE_TRANSFORMER, date_data, save_folder, train_on_dates

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ENCDEC_THREADS": "1"}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny Transformer trained on dates for a moment (its outputs vary with the input)."""
    dates = date_data()
    trained = train_on_dates({**DATE_TRANSFORMER, "encoder_layers": 1, "decoder_layers": 1}, dates, steps=150, lr=3e-3)
    return save_folder(trained, dates[0], tmp_path_factory.mktemp("corpus") / "model")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """600 dates, with a blank line every 97 lines."""
    lines = [source if i % 97 else "" for i, (source, _) in enumerate(make_date_pairs(600, seed=11))]
    path = tmp_path_factory.mktemp("corpus-input") / "dates.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def encdec(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "encdec", *argv], env=ENV, capture_output=True, text=True,
                          timeout=600, **kwargs)


@pytest.fixture(scope="module")
def reference(model, corpus, tmp_path_factory) -> bytes:
    """The uninterrupted one-process output of the corpus, chunks of 40 lines, greedy."""
    out = tmp_path_factory.mktemp("reference") / "out.txt"
    done = encdec("translate", "--model", str(model), "--input", str(corpus), "--output", str(out),
                  "--chunk-size", "40", "--num-beams", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_bytes()


def test_the_output_has_a_line_per_input_line_and_progress_says_so(reference, corpus, model, tmp_path) -> None:
    lines = reference.decode().split("\n")[:-1]
    assert len(lines) == count_lines(corpus) == 600 and lines[0] == "" and lines[1]
    assert len(set(lines)) > 100  # real, varied translations
    done = encdec("translate", "--model", str(model), "--input", str(corpus), "--output", str(tmp_path / "b.txt"),
                  "--chunk-size", "1000", "--num-beams", "1")
    assert (tmp_path / "b.txt").read_bytes() == reference  # chunk boundaries do not change the translations
    assert "encdec translate: done, 600/600 lines" in done.stderr  # stderr is no terminal: lines, not a bar
    quiet = encdec("translate", "--model", str(model), "--input", str(corpus), "--quiet", "--num-beams", "1")
    assert quiet.stdout.encode() == reference and "lines/s" not in quiet.stderr


def test_a_pipe_gets_translations_before_its_input_ends(model) -> None:
    process = subprocess.Popen([sys.executable, "-m", "encdec", "translate", "--model", str(model), "--num-beams",
                                "1", "--quiet"], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        process.stdin.write("March 3, 2001\n3rd of March 2021\n")
        process.stdin.flush()  # two lines of a 1000-line chunk, and the input stays open
        first = process.stdout.readline()
        assert first.strip(), process.stderr.read() if process.poll() is not None else "no translation"
        assert process.poll() is None  # still reading its input
        process.stdin.write("Wednesday, 3 Mar 2021\n")
        process.stdin.close()
        rest = process.stdout.read().splitlines()
    finally:
        process.kill()
        process.wait()
    assert len(rest) == 2


def kill_when_done(command: list[str], state: Path, lines: int) -> None:
    """Start ``command`` and kill -9 it once ``state`` records at least ``lines`` finished lines."""
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    try:
        while True:
            assert process.poll() is None, f"finished before it was killed: {process.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline
            try:
                if json.loads(state.read_text())["lines"] >= lines:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


@pytest.mark.parametrize("resume_with", ["one process", "two processes"])
def test_kill_9_then_resume_gives_the_same_bytes(model, corpus, reference, tmp_path, resume_with: str) -> None:
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(corpus), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1"]
    kill_when_done([sys.executable, "-m", "encdec", *args], tmp_path / "out.txt.partial.json", 120)
    assert not out.exists() and (tmp_path / "out.txt.partial").is_file()
    assert encdec(*args).returncode == 2  # without --resume the interrupted run is not thrown away
    if resume_with == "one process":
        done = subprocess.run([sys.executable, "-m", "encdec", *args, "--resume"], env=ENV, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    else:  # two CPU processes (`accelerate launch --cpu` alone starts one)
        launch(["encdec", *args, "--resume"], accelerate=True, timeout=600)
    assert out.read_bytes() == reference
    assert not (tmp_path / "out.txt.partial").exists() and not (tmp_path / "out.txt.partial.json").exists()


def test_two_processes_give_one_process_output(model, corpus, reference, tmp_path) -> None:
    out = tmp_path / "two.txt"
    launch(["encdec", "translate", "--model", str(model), "--input", str(corpus), "--output", str(out),
                   "--chunk-size", "40", "--num-beams", "1"], accelerate=True, timeout=600)
    assert out.read_bytes() == reference


def test_a_resume_that_differs_is_refused_naming_what(model, corpus, tmp_path, capsys) -> None:
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(corpus), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1"]
    kill_when_done([sys.executable, "-m", "encdec", *args], tmp_path / "out.txt.partial.json", 40)
    changed = tmp_path / "changed.txt"
    changed.write_bytes(corpus.read_bytes().replace(b"March", b"April", 1))
    for argv, named in ((["--num-beams", "2"], "options num_beams: 1 before, 2 now"),
                        (["--chunk-size", "50"], "options chunk_size: 40 before, 50 now"),
                        (["--input", str(changed)], "input path"),
                        (["--model", str(model), "--model", str(model)], "models:")):
        capsys.readouterr()
        assert main([*args, *argv, "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert "--resume: this run differs from the interrupted one in" in err and named in err, err
    assert main([*args, "--resume", "--quiet"]) == 0  # the same command goes on


def test_n_best_scores_and_alignments_stay_aligned_across_chunks(model, corpus, tmp_path) -> None:
    outputs = {}
    for chunk in ("3", "1000"):
        out = tmp_path / f"nbest-{chunk}.txt"
        done = encdec("translate", "--model", str(model), "--input", str(corpus), "--output", str(out),
                      "--chunk-size", chunk, "--num-beams", "3", "--n-best", "2", "--scores", "--alignments")
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[chunk] = out.read_text().splitlines()
    small, whole = ([line.split(" ||| ") for line in outputs[key]] for key in ("3", "1000"))
    ids = [int(fields[0]) for fields in small]
    assert ids == [int(fields[0]) for fields in whole]  # every entry where it belongs, whatever the chunking
    assert ids == [i for i in range(600) for _ in range(2 if i % 97 else 1)]  # a blank line: one empty entry
    for a, b in zip(small, whole, strict=True):  # the scores agree; beams of (nearly) tied scores may swap
        assert a[2:3] == [""] == b[2:3] or abs(float(a[2]) - float(b[2])) < 1e-3, (a, b)
    assert sum(a == b for a, b in zip(small, whole, strict=True)) >= 0.98 * len(small)


def test_align_streams_and_resumes(model, corpus, tmp_path) -> None:
    targets = tmp_path / "targets.txt"
    targets.write_text("".join(("2001-03-03" if line.strip() else "") + "\n"
                               for line in corpus.read_text().split("\n")[:-1]))
    whole = encdec("align", "--model", str(model), "--source-file", str(corpus), "--target-file", str(targets))
    out = tmp_path / "links.txt"
    args = ["align", "--model", str(model), "--source-file", str(corpus), "--target-file", str(targets), "--output",
            str(out), "--chunk-size", "25"]
    kill_when_done([sys.executable, "-m", "encdec", *args], tmp_path / "links.txt.partial.json", 50)
    assert encdec(*args, "--resume").returncode == 0
    assert out.read_text() == whole.stdout and len(whole.stdout.splitlines()) == 600


def test_chunk_file_keeps_what_is_done_when_a_write_fails(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out.txt"
    record = {"options": {"num_beams": 1}}
    writer = ChunkFile(out, record)
    writer.write(2, "a\nb\n")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(EncdecError, match=r"No space left on device\. The first 2 lines are done: make room, then "
                                          r"rerun the command with --resume"):
        writer.write(2, "c\nd\n")
    monkeypatch.undo()
    resumed = ChunkFile(out, record, resume=True)  # the half-written chunk is dropped
    assert resumed.done_lines == 2 and (tmp_path / "out.txt.partial").read_bytes() == b"a\nb\n"
    resumed.write(2, "c\nd\n")
    resumed.finish()
    assert out.read_text() == "a\nb\nc\nd\n"
    with pytest.raises(EncdecError, match="already exists; pass --overwrite"):
        ChunkFile(out, record)


def test_difference_names_the_first_change_and_paired_chunks_pair_lines(tmp_path) -> None:
    assert difference({"a": 1, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [1, 3]}}) == "b c 2: 2 before, 3 now"
    assert difference({"a": 1}, {"a": 1}) is None
    (tmp_path / "s").write_text("1\n2\n3\n")
    (tmp_path / "t").write_text("x\ny\nz\n")
    chunks = list(paired_chunks(tmp_path / "s", tmp_path / "t", 2))
    assert [(c.index, c.start, c.lines) for c in chunks] == [(0, 0, [("1", "x"), ("2", "y")]), (1, 2, [("3", "z")])]


def test_the_seconds_spent_carry_over_a_resume(tmp_path) -> None:
    """``ChunkFile`` counts the seconds of every attempt in its record; a record of an older encdec, without the
    count, leaves it unknown (None) instead of counting the last attempt alone."""
    out = tmp_path / "out.txt"
    ChunkFile(out, {"options": {}}).write(2, "a\nb\n")
    state_path = tmp_path / "out.txt.partial.json"
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "seconds": 100.0}))  # as if the first attempt had taken 100 s
    resumed = ChunkFile(out, {"options": {}}, resume=True)
    assert resumed.done_lines == 2 and 100.0 <= resumed.seconds() < 160.0
    resumed.write(1, "c\n")
    assert json.loads(state_path.read_text())["seconds"] >= 100.0
    state_path.write_text(json.dumps({key: value for key, value in state.items() if key != "seconds"}))
    assert ChunkFile(out, {"options": {}}, resume=True).seconds() is None
