"""What a new user meets in the first hour: no command deletes its own input, every hint names a command that works,
and a wrong folder or file is named for what it is, with the flag or path that works."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from encdec.errors import OverwriteError
from encdec.ship.ctranslate2_export import export_ctranslate2
from encdec_cli import main
from tiny_model_folders import build_model_folders


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Tiny random model folders of both families under runs/, and a CTranslate2 export of the Transformer."""
    runs = tmp_path_factory.mktemp("first-hour") / "runs"
    made = build_model_folders(runs)
    made["export"] = export_ctranslate2(made["transformer"], runs / "exported")
    return made


def error_of(argv: list[str], capsys) -> str:
    """The one-line error ``encdec`` prints for ``argv`` (it must exit with status 2)."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_export_never_writes_over_its_model(folders, where: str, capsys) -> None:
    model = folders["transformer"]
    before = sorted(path.name for path in model.iterdir())
    output = {"same": model, "inside": model / "ct2", "around": model.parent}[where]
    err = error_of(["export", "--model", str(model), "--format", "ctranslate2", "--output", str(output),
                    "--overwrite"], capsys)
    assert {"same": " is the input", "inside": " lies inside the input", "around": " contains the input"}[where] in err
    assert sorted(path.name for path in model.iterdir()) == before
    with pytest.raises(OverwriteError, match="destroy the input"):
        export_ctranslate2(model, output, overwrite=True)


def test_the_ctranslate2_hint_names_an_export_that_works(folders, tmp_path, capsys) -> None:
    source = tmp_path / "in.txt"
    source.write_text("March 3, 2001\n")
    err = error_of(["translate", "--engine", "ctranslate2", "--model", str(folders["transformer"]),
                    "--input", str(source)], capsys)
    assert "is a torch model folder, not a CTranslate2 export" in err
    command = err[err.index("`encdec export") + 1: err.index("`, then")]
    output = Path(shlex.split(command)[-1])
    assert output != folders["transformer"] and folders["transformer"] not in output.parents
    assert main(shlex.split(command)[1:]) == 0  # the suggested command works
    assert main(["translate", "--engine", "ctranslate2", "--model", str(output), "--input", str(source)]) == 0
    err = error_of(["translate", "--engine", "ctranslate2", "--model", str(folders["transformer"]),
                    "--input", str(source)], capsys)
    assert f"its export is {output}: pass `--model {output}`" in err  # once it exists, the hint points at it
    err = error_of(["translate", "--engine", "ctranslate2", "--model", str(folders["rnn"]), "--input", str(source)],
                   capsys)
    assert "RNN model, and CTranslate2 has no recurrent decoder" in err and "--engine torch" in err
    assert "encdec export" not in err  # an export of an RNN can never work


def test_wrong_folders_are_named_for_what_they_are(folders, tmp_path, capsys) -> None:
    source = tmp_path / "in.txt"
    source.write_text("March 3, 2001\n")
    err = error_of(["translate", "--model", str(folders["export"]), "--input", str(source)], capsys)
    assert "is a CTranslate2 export" in err and "--engine ctranslate2" in err and str(folders["transformer"]) in err
    runs = folders["transformer"].parent
    err = error_of(["translate", "--model", str(runs), "--input", str(source)], capsys)
    assert "holds model folders, not a model" in err and f"--model {runs / 'rnn'}" in err
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    err = error_of(["evaluate", "--model", str(empty), "--source-file", str(source), "--reference-file",
                    str(source)], capsys)
    assert "is not a model folder" in err and "training.output_dir" in err
    assert "save_for_pipeline" not in err


def test_input_files_name_the_problem(folders, tmp_path, capsys) -> None:
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("March 3, 2001\nMärz 3, 2001\n".encode("latin-1"))
    err = error_of(["translate", "--model", str(folders["transformer"]), "--input", str(latin1)], capsys)
    assert f"{latin1}, line 2, is not UTF-8" in err and "iconv" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = tmp_path / "out.txt"
    assert main(["translate", "--model", str(folders["transformer"]), "--input", str(empty), "--output",
                 str(out)]) == 0
    assert f"{empty} is empty" in capsys.readouterr().err and out.read_text() == ""


def test_translate_and_align_never_write_over_their_input(folders, tmp_path, capsys) -> None:
    source = tmp_path / "in.txt"
    source.write_text("March 3, 2001\n")
    err = error_of(["translate", "--model", str(folders["transformer"]), "--input", str(source), "--output",
                    str(source), "--overwrite"], capsys)
    assert "is the input" in err and source.read_text() == "March 3, 2001\n"
    err = error_of(["align", "--model", str(folders["transformer"]), "--source-file", str(source), "--target-file",
                    str(source), "--output", str(folders["transformer"] / "x.txt")], capsys)
    assert "lies inside the input" in err


def test_one_decoding_default_the_models_generation_config(folders, tmp_path, capsys, monkeypatch) -> None:
    """translate and evaluate decode as the model's generation_config.json says unless told (as serve does), and
    --help says so."""
    from transformers import GenerationConfig

    from encdec.inference import load_model_and_tokenizer
    from encdec.inference.decoding import resolve_options
    from encdec.inference.engines import TorchEngine

    model = tmp_path / "model"
    model.mkdir()
    for item in folders["transformer"].iterdir():
        (model / item.name).symlink_to(item)
    (model / "generation_config.json").unlink()
    generation = GenerationConfig.from_pretrained(folders["transformer"])
    generation.num_beams = 3
    generation.save_pretrained(model)
    assert resolve_options(load_model_and_tokenizer(model)[0].generation_config).num_beams == 3
    seen = []
    original = TorchEngine.generate
    monkeypatch.setattr(TorchEngine, "generate", lambda self, *args: seen.append(args[-1].get("num_beams")) or
                        original(self, *args))
    source = tmp_path / "in.txt"
    source.write_text("March 3, 2001\n")
    assert main(["translate", "--model", str(model), "--input", str(source)]) == 0
    assert main(["translate", "--model", str(model), "--input", str(source), "--num-beams", "1"]) == 0
    assert main(["evaluate", "--model", str(model), "--source-file", str(source), "--reference-file",
                 str(source)]) == 0
    assert seen == [3, 1, 3]  # the generation config's 3, resolved once (encdec.inference.decoding.resolve_options)
    assert '"num_beams": 3' in capsys.readouterr().out  # evaluate records the beam size it decoded with
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    assert "default: the model's generation_config.json" in " ".join(capsys.readouterr().out.split())


def start_training(config: Path, cwd: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "encdec", "train", str(config), *overrides], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stderr_after_kill(process: subprocess.Popen) -> str:
    """The end of what ``process`` wrote on stderr, once it is stopped (killed if it still runs)."""
    if process.poll() is None:
        process.kill()
    return process.communicate(timeout=60)[1][-3000:]


def interrupt_when(process: subprocess.Popen, ready, timeout: float = 240) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, stderr_after_kill(process)
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-3000:]
    return out, err


def test_ctrl_c_prints_the_checkpoint_and_the_command_that_resumes(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C at a known point: ``ENCDEC_STOP_AT=checkpoint:1`` stops the run (SIGSTOP) right after its first
    checkpoint (step 5) is saved; the test sends SIGINT there and lets it go on, so the one line names exactly that
    checkpoint. Its output goes to files: a pipe nobody reads while the run trains could fill and block it. The
    printed command then runs (in this process, from the same folder) and resumes."""
    from encdec.stop_points import STOP_ENV
    from test_cli import write_run_config

    out_dir = tmp_path / "run"
    config = write_run_config(tmp_path, "transformer", out_dir, training={"max_steps": 100000})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", STOP_ENV: "checkpoint:1"}
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err_file:
        training = subprocess.Popen([sys.executable, "-m", "encdec", "train", str(config), "--training.seed", "3"],
                                    cwd=tmp_path, env=env, stdout=out, stderr=err_file)
    try:
        deadline = time.monotonic() + 240
        pid, status = os.waitpid(training.pid, os.WUNTRACED | os.WNOHANG)
        while not pid:  # (0, 0) until the child stops (or ends)
            assert time.monotonic() < deadline, (tmp_path / "err.txt").read_text()[-3000:]
            time.sleep(0.05)
            pid, status = os.waitpid(training.pid, os.WUNTRACED | os.WNOHANG)
        assert os.WIFSTOPPED(status), (tmp_path / "err.txt").read_text()[-3000:]
        training.send_signal(signal.SIGINT)  # pending while stopped, handled once it goes on
        training.send_signal(signal.SIGCONT)
        assert training.wait(timeout=120) == 130, (tmp_path / "err.txt").read_text()[-3000:]
    finally:
        if training.poll() is None:
            training.kill()
            training.wait(timeout=60)
    err = (tmp_path / "err.txt").read_text()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    last = err.strip().splitlines()[-1]
    kept = out_dir / "checkpoints" / "checkpoint-5"
    assert last.startswith(f"encdec train: stopped; the last checkpoint kept is {kept}. Resume with: encdec train ")
    resume = shlex.split(last.split("Resume with: ")[1])
    assert resume[-4:] == ["--training.seed", "3", "--training.resume_from_checkpoint", "true"]
    step = int(kept.name.split("-")[1])
    monkeypatch.chdir(tmp_path)
    assert main([*resume[1:], "--training.max_steps", str(step + 5)]) == 0
    assert json.loads((out_dir / "eval_results.json").read_text())["train"]["global_step"] == step + 5


def test_ctrl_c_before_a_checkpoint_and_resume_without_one_say_so(tmp_path: Path, monkeypatch, caplog) -> None:
    """Ctrl-C before the first checkpoint says so and how to start over; resuming then (in this process) warns that
    there is no checkpoint yet and trains from step 0."""
    from test_cli import write_run_config

    out_dir = tmp_path / "run"
    config = write_run_config(tmp_path, "rnn", out_dir, training={"max_steps": 100000, "eval_steps": 100000})
    training = start_training(config, tmp_path)
    _, err = interrupt_when(training, lambda: (out_dir / "tokenizer").is_dir())
    assert "Traceback" not in err
    assert "stopped before the first checkpoint was saved" in err.strip().splitlines()[-1]
    assert "--training.overwrite true" in err.strip().splitlines()[-1]
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert main(["train", str(config), "--training.max_steps", "2", "--training.resume_from_checkpoint",
                     "true"]) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any("holds no complete checkpoint yet: starting from step 0" in message for message in warnings), warnings


def test_ctrl_c_stops_at_the_next_step_even_from_inside_a_finalizer_and_at_once_when_pressed_again() -> None:
    """Python raises a signal's KeyboardInterrupt in whatever runs; inside a finalizer it is printed with a traceback
    and dropped (seen in a test run). StopOnCtrlC takes the first Ctrl-C as a flag, raised at the next step."""
    import gc

    from encdec.training import StopOnCtrlC

    class RaisesSigintWhenCollected:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    guard = StopOnCtrlC()
    guard.on_step_end(None, None, None)  # no Ctrl-C yet: nothing happens
    with guard:
        RaisesSigintWhenCollected()  # collected at once: the signal comes inside __del__
        gc.collect()
        assert guard.interrupted
        with pytest.raises(KeyboardInterrupt):
            guard.on_step_end(None, None, None)
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C does not wait for the step
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
