"""A backend from outside the package: a toy backend installed through the entry-point group ``encdec.backends``
(a ``dist-info`` folder on ``PYTHONPATH``, found by ``importlib.metadata`` as pytest finds its plugins) exports,
translates and serves with the command line, encdec untouched; a broken entry point is named in one line. Folder
detection and its messages are the registry's for any backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from encdec.backends import BACKENDS, Backend, register
from encdec.errors import InputFileError
from encdec.folders import decides_translations, require_model_folder
from encdec.inference import load_engine, translate
from test_serve import ServeProcess, request
from tiny_model_folders import build_model_folders

TOY_DECLARATION = '''\
"""A toy encdec backend: its declaration, standard library only (what `encdec --help` reads)."""

BACKEND = {"name": "toy", "module": "toy_backend.engine", "class_name": "ToyEngine",
           "summary": "the torch engine over a toy export", "quantize": ("int8",), "export_format": "toy",
           "exporter": "toy_backend.engine:export_command", "export_summary": "a toy copy of the model",
           "marker": "toy_export.json", "folder_name": "a toy", "output_suffix": "toy"}
'''
TOY_ENGINE = '''\
"""The toy backend's engine and exporter: the torch engine over a copy of the model in the export's model/ folder."""

import json
import shutil
from pathlib import Path

from encdec.folders import require_model_folder
from encdec.inference.engines import TorchEngine


def export_command(model_dir, output_dir, quantize, overwrite):
    model_dir, output_dir = require_model_folder(model_dir), Path(output_dir)
    shutil.copytree(model_dir, output_dir / "model", dirs_exist_ok=overwrite)
    (output_dir / "toy_export.json").write_text(json.dumps({"source_folder": str(model_dir)}))
    return f"toy export ({quantize}) written to {output_dir}"


class ToyEngine(TorchEngine):
    name = "toy"

    @classmethod
    def load(cls, model_dirs, quantize=None, dtype=None, device="cpu"):
        folder = require_model_folder(model_dirs[0], engine=cls.name)
        return super().load([folder / "model"], quantize=quantize, dtype=dtype, device=device)
'''


def install_toy_backend(site: Path, *entry_points: str) -> dict[str, str]:
    """The toy backend's package and its ``dist-info`` (``entry_points``: lines of the ``encdec.backends`` group) in
    ``site``; the environment of a process that finds them, encdec as this process finds it."""
    (site / "toy_backend").mkdir(parents=True)
    (site / "toy_backend" / "__init__.py").write_text(TOY_DECLARATION)
    (site / "toy_backend" / "engine.py").write_text(TOY_ENGINE)
    info = site / "toy_backend-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[encdec.backends]\n" + "\n".join(entry_points) + "\n")
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    return build_model_folders(tmp_path_factory.mktemp("toy-backend"))["transformer"]


BROKEN_LINE = ("encdec: the backend entry point broken = toy_missing:BACKEND (from toy-backend) in group "
               "encdec.backends does not load (ModuleNotFoundError: No module named 'toy_missing'); it is skipped: fix "
               "or uninstall its package.")


def test_an_entry_point_backend_exports_translates_and_serves(model_folder, tmp_path, monkeypatch) -> None:
    """`encdec export --format toy`, `encdec translate --engine toy` (one process running both commands) and `encdec
    serve --model DIR,engine=toy`, with a backend that only an entry point declares: each answers as the torch engine
    does over the model exported. A broken entry point beside it is named in one line, once, though the command line
    reads the registry before encdec is imported and encdec again."""
    env = install_toy_backend(tmp_path / "site", "broken = toy_missing:BACKEND", "toy = toy_backend:BACKEND")
    export, source, output = tmp_path / "exported", tmp_path / "source.txt", tmp_path / "output.txt"
    source.write_text("3 Mar 2021\n")
    commands = [["export", "--model", str(model_folder), "--format", "toy", "--output", str(export)],
                ["translate", "--model", str(export), "--engine", "toy", "--input", str(source), "--output",
                 str(output), "--quiet"]]
    code = f"import sys, encdec_cli\nsys.exit(max(encdec_cli.main(argv) for argv in {commands!r}))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == f"toy export (float32) written to {export}", done.stderr
    assert [line for line in done.stderr.splitlines() if "toy_missing" in line] == [BROKEN_LINE]
    expected = translate(*load_engine(model_folder), ["3 Mar 2021"])
    assert output.read_text().splitlines() == expected
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # ServeProcess starts `encdec serve` in this environment
    with ServeProcess("--model", f"{export},engine=toy") as server:
        _, info, _ = request(f"{server.url}/info", timeout=60)
        _, answer, _ = request(f"{server.url}/translate", {"text": "3 Mar 2021"}, timeout=60)
    assert [model["engine"] for model in info["models"]] == ["toy"]
    assert answer == {"translations": [{"text": expected[0]}]}
    assert "toy" not in BACKENDS  # this process never saw the entry point


def test_the_command_line_lists_an_entry_point_backend_without_importing_encdec(tmp_path) -> None:
    """`encdec --help`'s summary of export and the choices of --engine and --format come from the registry, the
    entry point's backend among them, without importing encdec or torch; the broken entry point is named on stderr."""
    env = install_toy_backend(tmp_path / "site", "broken = toy_missing:BACKEND", "toy = toy_backend:BACKEND")
    code = ("import json, sys, encdec_cli\n"
            "parser = encdec_cli.build_parser()\n"
            "commands = next(a for a in parser._actions if a.dest == 'command')\n"
            "flags = {f: list(a.choices) for name in ('translate', 'export')\n"
            "         for a in commands.choices[name]._actions for f in a.option_strings if a.choices}\n"
            "summary = next(a.help for a in commands._choices_actions if a.dest == 'export')\n"
            "print(json.dumps([flags['--engine'], flags['--format'], summary,\n"
            "                  sorted(m for m in ('encdec', 'torch') if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    engines, formats, summary, imported = json.loads(done.stdout)
    assert engines == ["torch", "ctranslate2", "onnxruntime", "toy"] and imported == [], done.stderr
    assert formats == ["ctranslate2", "onnx", "web", "toy"]
    assert summary == ("export a model folder to CTranslate2 (Transformer), ONNX (both families), a static site that "
                       "translates in the browser or a toy copy of the model")
    assert done.stderr.splitlines() == [BROKEN_LINE]


@pytest.fixture
def toy_backend():
    """A backend with an export of its own, registered for the test; the registry as it was afterwards."""
    before = dict(BACKENDS)
    yield register(Backend("toy", "toy_backend.engine", "ToyEngine", "the toy", export_format="toy",
                           exporter="toy_backend.engine:export_command", marker="toy_export.json",
                           model_files=("*.toy",), folder_name="a toy", output_suffix="toy"))
    BACKENDS.clear()
    BACKENDS.update(before)


def test_folder_detection_and_its_messages_are_the_registry_s(toy_backend, model_folder, tmp_path) -> None:
    """A registered backend's marker makes its folders its own: the torch engine refuses one, naming the engine and
    the folder it came from; its engine refuses a torch folder with the export command; its files decide
    translations."""
    export = tmp_path / "model-toy"
    export.mkdir()
    (export / "toy_export.json").write_text(json.dumps({"source_folder": "runs/mine"}))
    with pytest.raises(InputFileError, match=f"^{export} is a toy export \\(written by `encdec export`\\): translate "
                                             "it with `--engine toy`, or give the torch engine the model folder it "
                                             "came from \\(runs/mine\\).$"):
        require_model_folder(export)
    assert require_model_folder(export, engine="toy") == export
    with pytest.raises(InputFileError, match=f"is a torch model folder, not a toy export: export it first with "
                                             f"`encdec export --model {model_folder} --format toy --output "):
        require_model_folder(model_folder, engine="toy")
    assert decides_translations("toy_export.json") and decides_translations("weights.toy")
    assert not decides_translations("notes.txt")
