"""Corpus-scale translation (encdec.inference.corpus, on encdec.chunked): streaming from a pipe, resuming after kill -9
to the same bytes (one process or two, before and after), two processes equal to one, refused resumes, a line that is
not UTF-8, memory that does not grow with the input, and n-best lists, scores and alignments aligned across chunk
boundaries, ordered by their scores, each text once unless ``--keep-duplicates``.

The kill -9 tests stop the run at a known point (``ENCDEC_STOP_AT=chunk:N``, ``encdec.stop_points``: right after its
N-th chunk is on disk) and kill it there, so the lines done at the kill are known exactly, on any machine."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from encdec.chunked import ChunkFile, Progress, difference, open_chunks, paired_chunks, run_chunks
from encdec.data import make_date_pairs
from encdec.errors import EncdecError
from encdec.inference import load_engine, translate_n_best_ids
from encdec.inference.corpus import TranslationOutput, open_output
from encdec.inference.engines import TorchEngine
from encdec.io_utils import count_lines
from encdec.processes import Shard
from encdec.stop_points import STOP_ENV
from encdec_cli import main
from test_distributed import STOP_DEADLINE, launch, launch_until_stopped, run_until_stopped
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


def encdec_here(capsys: pytest.CaptureFixture, *argv: str) -> subprocess.CompletedProcess:
    """``encdec argv...`` run by ``main`` in this process, its status and output as ``encdec``'s: for the commands
    whose own process is not what a test is about (a start of torch and transformers costs seconds). Standard error
    is no terminal here either, so progress comes as lines, as in a child process."""
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["encdec", *argv], status, out, err)


def first_lines(text: bytes, lines: int) -> bytes:
    """The first ``lines`` lines of ``text``, with their line ends."""
    return b"".join(line + b"\n" for line in text.split(b"\n")[:lines])


def partial_state(out: Path) -> dict:
    """What an interrupted run into ``out`` recorded (``OUT.partial.json``)."""
    return json.loads(out.with_name(out.name + ".partial.json").read_text())


def assert_stopped_after(out: Path, lines: int, expected: bytes) -> None:
    """The run into ``out`` was killed with exactly ``lines`` input lines done, and ``OUT.partial`` holds exactly
    their output (``expected``'s first lines): nothing less, nothing of the next chunk."""
    state = partial_state(out)
    partial = out.with_name(out.name + ".partial").read_bytes()
    assert (state["lines"], state["bytes"]) == (lines, len(first_lines(expected, lines)))
    assert partial == first_lines(expected, lines) and not out.exists()


@pytest.fixture(scope="module")
def reference(model, corpus, tmp_path_factory) -> bytes:
    """The uninterrupted one-process output of the corpus, chunks of 40 lines, greedy."""
    out = tmp_path_factory.mktemp("reference") / "out.txt"
    assert main(["translate", "--model", str(model), "--input", str(corpus), "--output", str(out), "--chunk-size",
                 "40", "--num-beams", "1", "--quiet"]) == 0
    return out.read_bytes()


def test_the_output_has_a_line_per_input_line_and_progress_says_so(reference, corpus, model, tmp_path,
                                                                   capsys) -> None:
    lines = reference.decode().split("\n")[:-1]
    assert len(lines) == count_lines(corpus) == 600 and lines[0] == "" and lines[1]
    assert len(set(lines)) > 100  # real, varied translations
    done = encdec_here(capsys, "translate", "--model", str(model), "--input", str(corpus), "--output",
                       str(tmp_path / "b.txt"), "--chunk-size", "1000", "--num-beams", "1")
    assert (tmp_path / "b.txt").read_bytes() == reference  # chunk boundaries do not change the translations
    assert "encdec translate: done, 600/600 lines" in done.stderr  # stderr is no terminal: lines, not a bar
    quiet = encdec_here(capsys, "translate", "--model", str(model), "--input", str(corpus), "--quiet", "--num-beams",
                        "1")
    assert quiet.stdout.encode() == reference and "lines/s" not in quiet.stderr


PIPE_TIMEOUT = 120  # seconds for a piped translation to come back (model loading on a loaded machine): a hang guard


def lines_of(stream) -> queue.Queue:
    """The lines of a child's ``stream``, read by a thread onto a queue (then None at its end), so that the test
    waits for each with a timeout instead of blocking on the pipe."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_a_pipe_gets_translations_before_its_input_ends(model, corpus, reference, tmp_path) -> None:
    """Two lines in, and the input left open: their translations come out (a chunk ends when no line has come for
    half a second), then the third line's once it is written; each the same as in a file run."""
    sources = corpus.read_text().split("\n")[1:4]  # line 0 is blank
    expected = [line + "\n" for line in reference.decode().split("\n")[1:4]]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "encdec", "translate", "--model", str(model),
                                    "--num-beams", "1", "--quiet"], env=ENV, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        out = lines_of(process.stdout)

        def next_line() -> str | None:
            try:
                return out.get(timeout=PIPE_TIMEOUT)
            except queue.Empty:
                pytest.fail(f"no output in {PIPE_TIMEOUT} s: {(tmp_path / 'stderr.txt').read_text()[-2000:]}")

        process.stdin.write(sources[0] + "\n" + sources[1] + "\n")
        process.stdin.flush()  # two lines of a 1000-line chunk, and the input stays open
        assert [next_line(), next_line()] == expected[:2], (tmp_path / "stderr.txt").read_text()[-2000:]
        assert process.poll() is None  # still reading its input
        process.stdin.write(sources[2] + "\n")
        process.stdin.close()
        assert next_line() == expected[2]
        assert next_line() is None  # and nothing more
        assert process.wait(timeout=PIPE_TIMEOUT) == 0
    finally:
        process.kill()
        process.wait(timeout=60)


@pytest.mark.parametrize("processes", ["1 then 1", "1 then 2", "2 then 1"])
def test_kill_9_then_resume_gives_the_same_bytes(model, corpus, reference, tmp_path, capsys,
                                                 processes: str) -> None:
    """Killed right after its third chunk of 40 lines is on disk (on one process, or on two: the main process
    writes every chunk), the run has exactly 120 lines done; resumed with one process or two, it ends with the
    uninterrupted one-process run's bytes (docs/command-line.md: `--resume` works whatever the number of processes
    before and after)."""
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(corpus), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1"]
    killed_on, resumed_on = processes.split(" then ")
    if killed_on == "1":
        run_until_stopped([sys.executable, "-m", "encdec", *args], ENV, "chunk:3", tmp_path / "killed.log")
    else:  # two CPU processes (`accelerate launch --cpu` alone starts one)
        launch_until_stopped(["encdec", *args], "chunk:3", tmp_path / "killed.log")
    assert_stopped_after(out, 120, reference)
    if processes == "1 then 1":
        assert encdec_here(capsys, *args).returncode == 2  # without --resume the interrupted run is not thrown away
    if resumed_on == "1":
        done = encdec_here(capsys, *args, "--resume")
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        launch(["encdec", *args, "--resume"], accelerate=True, timeout=600)
    assert out.read_bytes() == reference
    assert not (tmp_path / "out.txt.partial").exists() and not (tmp_path / "out.txt.partial.json").exists()


def test_two_processes_give_one_process_output(model, corpus, reference, tmp_path) -> None:
    """And the main process says at start how many processes run and how they share the work (once)."""
    out = tmp_path / "two.txt"
    result = launch(["encdec", "translate", "--model", str(model), "--input", str(corpus), "--output", str(out),
                     "--chunk-size", "40", "--num-beams", "1"], accelerate=True, timeout=600)
    assert out.read_bytes() == reference
    said = [line for line in (result.stdout + result.stderr).splitlines() if "processes" in line]
    assert said == ["[default0]:encdec translate: 2 processes: process p translates chunks p, p + N, ... and the "
                    "main one writes them in order"], said


def test_a_resume_that_differs_is_refused_naming_what(model, corpus, reference, tmp_path, capsys) -> None:
    """Options, models, another input file, and a change to a finished line of the input (here line 2, in the one
    chunk done) are each refused, naming the difference; the same command then goes on to the same bytes."""
    source = tmp_path / "in.txt"
    source.write_bytes(corpus.read_bytes())
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(source), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1"]
    run_until_stopped([sys.executable, "-m", "encdec", *args], ENV, "chunk:1", tmp_path / "killed.log")
    assert_stopped_after(out, 40, reference)
    changed = tmp_path / "changed.txt"
    changed.write_bytes(corpus.read_bytes())
    lines = corpus.read_bytes().split(b"\n")
    finished_line_changed = b"\n".join([*lines[:2], b"April 4, 2004", *lines[3:]])
    for argv, named, input_bytes in (
            (["--num-beams", "2"], "options num_beams: 1 before, 2 now", None),
            (["--chunk-size", "50"], "options chunk_size: 40 before, 50 now", None),
            (["--keep-duplicates"], "options keep_duplicates: false before, true now", None),
            (["--input", str(changed)], f"input path: {json.dumps(str(source.resolve()))} before", None),
            (["--model", str(model), "--model", str(model)], "models:", None),
            ([], "input sha256:", finished_line_changed)):
        if input_bytes is not None:
            source.write_bytes(input_bytes)
        capsys.readouterr()
        assert main([*args, *argv, "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert "--resume: this run differs from the interrupted one in" in err and named in err, err
        assert_stopped_after(out, 40, reference)  # a refused resume changes nothing
    source.write_bytes(corpus.read_bytes())
    assert main([*args, "--resume", "--quiet"]) == 0  # the same command goes on
    assert out.read_bytes() == reference


def test_n_best_scores_and_alignments_stay_aligned_across_chunks(model, corpus, tmp_path, capsys) -> None:
    outputs = {}
    for chunk in ("3", "1000"):
        out = tmp_path / f"nbest-{chunk}.txt"
        done = encdec_here(capsys, "translate", "--model", str(model), "--input", str(corpus), "--output", str(out),
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


def n_best_lists(out: str) -> dict[int, list[tuple[str, float]]]:
    """``ID ||| HYPOTHESIS ||| SCORE`` lines as each input's list of (hypothesis, score), in the printed order."""
    lists: dict[int, list[tuple[str, float]]] = {}
    for line in out.splitlines():
        index, text, score = line.split(" ||| ")
        lists.setdefault(int(index), []).append((text, float(score)))
    return lists


def test_n_best_lists_are_ordered_by_their_scores_each_text_once(model, tmp_path, capsys) -> None:
    """The K best distinct texts among all the beams, ordered by the printed score, log P(hypothesis | input): each
    score is the teacher-forced log-probability of the first (best) beam that gives its text. Without length
    normalisation (``--length-penalty 0``) beam search ranks by that same sum, so the first line is the plain
    translation."""
    sources = [source for source, _ in make_date_pairs(15, seed=11)]
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in sources))
    args = ["translate", "--model", str(model), "--input", str(source), "--num-beams", "6", "--quiet"]
    engine, tokenizer = load_engine(model)
    for length_penalty in ("1", "0"):
        source_ids, beams = translate_n_best_ids(engine, tokenizer, sources, 6, num_beams=6,
                                                 length_penalty=float(length_penalty))
        capsys.readouterr()
        assert main([*args, "--length-penalty", length_penalty, "--n-best", "4", "--scores"]) == 0
        lists = n_best_lists(capsys.readouterr().out)
        assert sorted(lists) == list(range(len(sources)))
        for index, listed in lists.items():
            texts, scores = [text for text, _ in listed], [score for _, score in listed]
            assert 1 <= len(listed) <= 4 and len(set(texts)) == len(texts), listed
            assert scores == sorted(scores, reverse=True), listed
            first = {}  # each text's first beam, scored by one teacher-forced pass
            for ids in beams[index]:
                first.setdefault(tokenizer.decode(ids, skip_special_tokens=True).strip(),
                                 sum(engine.teacher_forced(source_ids[index], ids)[0]))
            assert scores == pytest.approx([first[text] for text in texts], abs=1e-4)
            left_out = [score for text, score in first.items() if text not in texts]
            assert len(listed) == min(4, len(first)) and all(score <= scores[-1] + 1e-4 for score in left_out)
        if length_penalty == "0":
            capsys.readouterr()
            assert main([*args, "--length-penalty", "0"]) == 0
            plain = capsys.readouterr().out.splitlines()
            assert [lists[i][0][0] for i in range(len(sources))] == plain


def test_n_best_drops_texts_met_before_unless_asked_to_keep_them(model, tmp_path, capsys, monkeypatch) -> None:
    """Two token sequences that decode to one text (a subword split in two): listed once, as the earlier (better)
    beam, unless ``--keep-duplicates``. The beam search is asked for all its beams, whatever K, and its beams come
    here worst first, so the list, ordered by the printed score, reverses them."""
    engine, tokenizer = load_engine(model)
    whole, other = (tokenizer(text_target=text)["input_ids"] for text in ("2021-03-03", "1999-12-31"))
    vocab = tokenizer.get_vocab()
    split = next([*whole[:i], vocab[token[:cut]], vocab[token[cut:]], *whole[i + 1:]]
                 for i, token in enumerate(tokenizer.convert_ids_to_tokens(whole))
                 for cut in range(1, len(token)) if token[:cut] in vocab and token[cut:] in vocab)
    assert split != whole and tokenizer.decode(split, skip_special_tokens=True) == "2021-03-03"
    source_ids = tokenizer("3 March 2021")["input_ids"]
    expected = {tuple(ids): sum(engine.teacher_forced(source_ids, ids)[0]) for ids in (whole, split, other)}
    beams = [*sorted((whole, other), key=lambda ids: expected[tuple(ids)]), split]  # the split after the whole
    start = engine.config.decoder_start_token_id
    asked = []

    def generate(self, input_ids, attention_mask, budget, settings) -> list[list[int]]:
        asked.append(settings.get("num_return_sequences", 1))
        return [[start, *ids] for _ in input_ids for ids in beams][:len(input_ids) * asked[-1]]

    monkeypatch.setattr(TorchEngine, "generate", generate)
    source = tmp_path / "in.txt"
    source.write_text("3 March 2021\n")
    args = ["translate", "--model", str(model), "--input", str(source), "--num-beams", "3", "--scores", "--quiet"]
    assert expected[tuple(beams[0])] < expected[tuple(beams[1])]  # the beams come worst first
    for k, keep, kept in ((2, False, (whole, other)), (3, False, (whole, other)), (2, True, (whole, split, other)),
                          (3, True, (whole, split, other))):
        capsys.readouterr()
        assert main([*args, "--n-best", str(k), *(["--keep-duplicates"] if keep else [])]) == 0
        assert asked[-1] == 3  # every beam, to choose among
        listed = n_best_lists(capsys.readouterr().out)[0]
        ranked = sorted(kept, key=lambda ids: -expected[tuple(ids)])[:k]
        assert [text for text, _ in listed] == [tokenizer.decode(ids, skip_special_tokens=True) for ids in ranked]
        assert [score for _, score in listed] == pytest.approx([expected[tuple(ids)] for ids in ranked], abs=1e-4)
    capsys.readouterr()
    assert main([*args, "--n-best", "1"]) == 0 and asked[-1] == 1  # 1-best: the beam search's best, as it is
    best = beams[0]
    assert n_best_lists(capsys.readouterr().out)[0] == [(tokenizer.decode(best, skip_special_tokens=True),
                                                         pytest.approx(expected[tuple(best)], abs=1e-4))]


def test_align_streams_and_resumes(model, corpus, tmp_path, capsys) -> None:
    targets = tmp_path / "targets.txt"
    targets.write_text("".join(("2001-03-03" if line.strip() else "") + "\n"
                               for line in corpus.read_text().split("\n")[:-1]))
    whole = encdec_here(capsys, "align", "--model", str(model), "--source-file", str(corpus), "--target-file",
                        str(targets))
    out = tmp_path / "links.txt"
    args = ["align", "--model", str(model), "--source-file", str(corpus), "--target-file", str(targets), "--output",
            str(out), "--chunk-size", "25"]
    run_until_stopped([sys.executable, "-m", "encdec", *args], ENV, "chunk:2", tmp_path / "killed.log")
    assert_stopped_after(out, 50, whole.stdout.encode())
    assert encdec_here(capsys, *args, "--resume").returncode == 0
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


class Clock:
    """``encdec.chunked.output``'s ``time`` module in a test: its clocks read what the test sets, so the seconds that
    ``ChunkFile`` records are exact."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    monotonic = perf_counter


def test_the_seconds_spent_carry_over_a_resume(tmp_path, monkeypatch) -> None:
    """``ChunkFile`` counts the seconds of every attempt up to its last finished chunk: the first attempt finishes a
    chunk 4 s in and dies 30 s later (those 30 s did not finish anything), the resumed one finishes a chunk 2.5 s in:
    6.5 s. A record of an older encdec, without the count, leaves it unknown (None) instead of counting the last
    attempt alone."""
    clock = Clock()
    monkeypatch.setattr("encdec.chunked.output.time", clock)
    out = tmp_path / "out.txt"
    state_path = tmp_path / "out.txt.partial.json"
    first = ChunkFile(out, {"options": {}})
    clock.now += 4.0
    first.write(2, "a\nb\n")
    state = json.loads(state_path.read_text())
    assert (state["lines"], state["seconds"]) == (2, 4.0)
    clock.now += 30.0
    resumed = ChunkFile(out, {"options": {}}, resume=True)
    assert (resumed.done_lines, resumed.seconds()) == (2, 4.0)
    clock.now += 2.5
    resumed.write(1, "c\n")
    assert (json.loads(state_path.read_text())["seconds"], resumed.seconds()) == (6.5, 6.5)
    assert ChunkFile.recorded_seconds(out) == 6.5
    state_path.write_text(json.dumps({key: value for key, value in state.items() if key != "seconds"}))
    assert ChunkFile(out, {"options": {}}, resume=True).seconds() is None
    assert ChunkFile.recorded_seconds(out) is None


def test_a_line_that_is_not_utf8_stops_the_run_and_the_finished_chunks_survive_its_fix(
        model, corpus, reference, tmp_path, capsys, monkeypatch) -> None:
    """docs/command-line.md, "Bad input": a line that is not UTF-8 stops the run naming its line number (what was
    finished stays resumable). Line 131 lies in the fourth chunk of 40: the run stops in one line naming the file
    and the line, with the three chunks before it done; the same command with --resume stops there again, keeping
    them; once the line is fixed (as the message asks), --resume translates from the fourth chunk on, to the bytes of
    an uninterrupted run of the fixed file."""
    lines = corpus.read_bytes().split(b"\n")
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join([*lines[:130], b"M\xe4rz 3, 2001", *lines[131:]]))  # latin-1, not UTF-8
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(source), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1", "--quiet"]
    message = (f"encdec translate: error: {source}, line 131, is not UTF-8 (byte 2 of the line: invalid continuation "
               "byte); convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`.")
    for attempt in (args, [*args, "--resume"]):
        capsys.readouterr()
        assert main(attempt) == 2
        assert [line for line in capsys.readouterr().err.splitlines() if "error" in line] == [message]
        assert_stopped_after(out, 120, reference)
    source.write_bytes(corpus.read_bytes())  # fixed: the corpus, whose uninterrupted output is the reference
    translated = []
    chunk = TranslationOutput.chunk

    def counted(self, engine, tokenizer, chunk_, *options) -> str:
        translated.append(chunk_.index)
        return chunk(self, engine, tokenizer, chunk_, *options)

    monkeypatch.setattr(TranslationOutput, "chunk", counted)
    assert main([*args, "--resume"]) == 0
    assert translated == list(range(3, 15))  # the three finished chunks are kept, not translated again
    assert out.read_bytes() == reference
    assert not (tmp_path / "out.txt.partial").exists() and not (tmp_path / "out.txt.partial.json").exists()


def test_a_run_that_fails_before_its_first_chunk_leaves_nothing_behind(model, corpus, reference, tmp_path,
                                                                      capsys) -> None:
    """A line that is not UTF-8 in the first chunk: nothing was finished, so nothing is kept (no FILE.partial, its
    record or the lock), and once the line is fixed the same command runs, without --resume or --overwrite."""
    lines = corpus.read_bytes().split(b"\n")
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join([*lines[:10], b"M\xe4rz 3, 2001", *lines[11:]]))
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(source), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1", "--quiet"]
    assert main(args) == 2
    assert f"{source}, line 11, is not UTF-8" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]
    source.write_bytes(corpus.read_bytes())
    assert main(args) == 0
    assert out.read_bytes() == reference


def test_memory_stays_flat_however_long_the_input(tmp_path) -> None:
    """README: `encdec translate` "keeps memory flat however long the input". The whole path of a chunked run but
    the model (open_chunks, file_chunks, run_chunks, ChunkFile with its record of the input) is run over 20,000 and
    then 200,000 lines (1.3 and 13 MB) with a trivial per-chunk job; the Python memory peak of the larger run
    (tracemalloc) may exceed the smaller's by 2 MiB at most, where reading the input whole would add some 20 MiB.
    Both inputs are over a megabyte, so the blocks of 1 MiB in which they are counted and hashed are full in both."""
    def peak(count: int) -> int:
        path = tmp_path / f"{count}.txt"
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"line {i:07d} of a long generated input, for the run\n" for i in range(count))
        out = tmp_path / f"{count}.out"
        tracemalloc.start()
        try:
            chunks, total = open_chunks(path, 2000)
            output = open_output(str(out), str(path), [], {"options": {}}, False, False, None)
            run_chunks(chunks, lambda chunk: "".join(line[::-1] + "\n" for line in chunk.lines), output,
                       Progress("test", total, quiet=True), Shard())
            peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        with open(out, encoding="utf-8") as written:  # the run did the whole input
            assert sum(1 for _ in written) == count
        return peak_bytes

    small, large = peak(20_000), peak(200_000)
    assert large <= small + 2 * 2**20, (small, large)


def test_workers_end_with_their_launcher_and_resume_at_once(model, corpus, reference, tmp_path, capsys) -> None:
    """torchrun starts each worker in a session of its own, so a kill -9 of the launcher reached no worker, and
    they went on writing. Now the workers end with it (encdec_cli.die_with_launcher): killed right after the third
    chunk is on disk, with only the launcher killed, no worker is left, and the same command with --resume at once
    ends with the uninterrupted run's bytes."""
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(corpus), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1"]
    launch_until_stopped(["encdec", *args], "chunk:3", tmp_path / "killed.log", accelerate=False, kill_workers=False)
    assert_stopped_after(out, 120, reference)
    done = encdec_here(capsys, *args, "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_bytes() == reference


def wait_until_stopped(process: subprocess.Popen, log: Path) -> None:
    """Until the child ``process`` stops itself at its ``ENCDEC_STOP_AT`` point; a deadline guards the wait."""
    deadline = time.monotonic() + STOP_DEADLINE
    while True:
        pid, status = os.waitpid(process.pid, os.WUNTRACED | os.WNOHANG)
        if pid:
            assert os.WIFSTOPPED(status), f"it ended before its stopping point: {log.read_text()[-3000:]}"
            return
        assert time.monotonic() < deadline, f"no stop before the deadline: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def test_a_second_writer_is_refused_naming_the_first(model, corpus, reference, tmp_path, capsys) -> None:
    """Two commands on one output: the first, stopped (SIGSTOP) right after its first chunk, holds the output; a
    second with --resume, and one with --overwrite, are each refused in one line that names the first one's PID,
    and leave its files alone; the first, continued, ends with the uninterrupted run's bytes."""
    out = tmp_path / "out.txt"
    args = ["translate", "--model", str(model), "--input", str(corpus), "--output", str(out), "--chunk-size", "40",
            "--num-beams", "1"]
    log = tmp_path / "first.log"
    with open(log, "wb") as sink:
        first = subprocess.Popen([sys.executable, "-m", "encdec", *args], env={**ENV, STOP_ENV: "chunk:1"},
                                 stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until_stopped(first, log)
        partial = (tmp_path / "out.txt.partial").read_bytes()
        for extra in ("--resume", "--overwrite"):
            second = encdec_here(capsys, *args, extra)
            assert second.returncode == 2
            assert second.stderr.strip().splitlines() == [
                f"encdec translate: error: {out} is being written by another process (PID {first.pid}, which holds "
                f"{out}.lock); wait for it to finish, or stop it, then rerun."]
            assert (tmp_path / "out.txt.partial").read_bytes() == partial
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=STOP_DEADLINE) == 0, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=60)
    assert out.read_bytes() == reference
    assert not (tmp_path / "out.txt.lock").exists()
