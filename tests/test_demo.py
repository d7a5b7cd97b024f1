"""``make demo`` (``encdec demo``) runs from any folder: its run configs are package data."""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import re
import shlex
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import ModelCard

from encdec.inference import load_model_and_tokenizer, plotting, translate
from encdec.recipes import demo
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_serve import ServeProcess, Server, request, serve_app

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_demo_runs_outside_the_repository(demo_run) -> None:
    tmp_path, done = demo_run  # `encdec demo --max-steps 2` in a folder of its own (conftest.py)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    assert done.returncode == 0, done.stderr[-3000:]
    deprecations = [line for line in done.stderr.splitlines() if "deprecat" in line.lower() or "FutureWarning" in line]
    assert not deprecations, deprecations  # e.g. transformers 5.24's `past_key_values` renamed `cache`
    # lines nobody needs: tied weights reported missing, a bar for each load and save, the RNN's attention fields
    for noise in ("missing keys", "Loading weights", "Writing model shards", "no self-attention", "{'loss'"):
        assert noise not in done.stderr + done.stdout, noise
    for name in ("transformer", "lstm-bahdanau"):
        assert f"\n{name}: exact match " in done.stdout
        assert (tmp_path / "runs" / f"demo-{name}" / "model.safetensors").is_file()
        assert (tmp_path / "runs" / f"attention-{name}.png").read_bytes().startswith(b"\x89PNG")
        assert f"Training demo-{name}: " in done.stderr  # each model's progress bar says which model it trains
        # --max-steps 2 still saves (and keeps) two checkpoints: enough for `encdec average`
        assert len(list((tmp_path / "runs" / f"demo-{name}" / "checkpoints").glob("checkpoint-*"))) >= 2
    assert_averages(tmp_path / "runs" / "demo-transformer" / "checkpoints", tmp_path / "runs" / "avg")
    serve_line = done.stdout.strip().splitlines()[-1]
    assert_serves(shlex.split(serve_line), cwd=tmp_path, env=env)


def assert_averages(checkpoints: Path, output: Path) -> None:
    """The README's ``encdec average runs/demo-transformer/checkpoints/checkpoint-* --output ...`` works on what the
    demo kept: a model folder comes out (run in this process; test_readme_tour.py runs the README's command with
    bash)."""
    paths = sorted(str(path) for path in checkpoints.glob("checkpoint-*"))
    assert main(["average", *paths, "--output", str(output)]) == 0
    assert (output / "model.safetensors").is_file() and (output / "averaging.json").is_file()


def assert_serves(command: list[str], cwd: Path, env: dict) -> None:
    """The printed serve command starts a server that answers, then is stopped. It listens on port 0: the system
    gives a free port, which the start-up line names (a port chosen here and bound later could be taken by another
    process in between)."""
    assert command[1:5] == ["-m", "encdec", "serve", "--model"]
    server = subprocess.Popen([*command, "--port", "0", "--log-level", "warning"], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()  # read by a thread, so that every wait below has a timeout

    def read() -> None:
        for line in server.stdout:
            lines.put(line)
        lines.put(None)  # the server's output ended: it exited

    threading.Thread(target=read, daemon=True).start()
    try:
        seen, address, deadline = [], None, time.monotonic() + 120
        while address is None:  # the start-up line: "... on http://127.0.0.1:PORT - page at /, ..."
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))  # queue.Empty once the time is up
            assert line is not None, "the demo's serve command exited:\n" + "".join(seen)[-3000:]
            seen.append(line)
            address = re.search(r" on (http://127\.0\.0\.1:\d+) ", line)
        with urllib.request.urlopen(f"{address[1]}/health", timeout=30) as response:
            assert response.status == 200
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize("name", ["transformer", "lstm-bahdanau"])
def test_the_demo_heatmap_is_the_alignment_the_page_draws(demo_workspace, name, monkeypatch, tmp_path) -> None:
    """The matrix the demo plots for its example is the native API's alignment for the request the server's page
    sends (its default beam size, scores and alignments asked), to the API's six decimals."""
    plotted = {}
    draw = plotting.plot_attention
    monkeypatch.setattr(plotting, "plot_attention", lambda matrix, *args, **kwargs: plotted.setdefault(
        "matrix", matrix) is not None and draw(matrix, *args, **kwargs))
    model_dir = demo_workspace / "runs" / f"demo-{name}"
    demo.plot_example(model_dir, tmp_path / "attention.png")
    with serve_app(model_dir) as server:
        _, info, _ = request(f"{server.url}/info")
        _, body, _ = request(f"{server.url}/translate", {"text": [demo.EXAMPLE], "return_scores": True,
                                                       "num_beams": info["defaults"]["num_beams"],
                                                       "return_alignments": info["alignments"]})
    weights = np.array(body["translations"][0]["alignment"]["weights"]).T  # (T, S), as plotted
    assert plotted["matrix"].shape == weights.shape
    np.testing.assert_allclose(plotted["matrix"], weights, atol=1e-6, rtol=0)


def test_the_readme_s_libretranslate_call_works_after_the_demo(demo_workspace) -> None:
    """The README's LibreTranslate example right after the demo: its `encdec serve` (the two demo models, whose cards
    name en and iso: the second, of the same pair, served by its name, as the start-up line says), its curl body and
    its Python client answer with the demo Transformer's translation, and list en -> iso."""
    section = README.read_text()[README.read_text().index("## Serve LibreTranslate's and DeepL's clients"):]
    shell = re.search(r"```bash\n(.*?)```", section, re.S)[1].replace("\\\n", " ")
    words = shlex.split(next(line for line in shell.splitlines() if line.startswith("encdec serve ")))
    folders = [demo_workspace / words[i + 1] for i, word in enumerate(words) if word == "--model"]
    body = json.loads(re.search(r"-d '(.*?)'", shell)[1])
    python = re.search(r"```python\n(.*?)```", section, re.S)[1]
    assert [ModelCard.load(folder / "README.md").data.language for folder in folders] == [["en", "iso"]] * 2
    served = load_models([str(folder) for folder in folders])
    assert list(served.models) == ["en-iso", "demo-lstm-bahdanau"]
    assert [line.split(" translates ")[1][:6] for line in served.notices()] == ["en-iso"]
    model, tokenizer = load_model_and_tokenizer(str(folders[0]))
    printed = io.StringIO()
    with Server(create_app(served)) as server:
        status, answer, _ = request(f"{server.url}/libretranslate/translate", body)
        with contextlib.redirect_stdout(printed):
            exec(python.replace("http://127.0.0.1:8000", server.url), {})  # the README's own code
    assert status == 200 and answer["translatedText"] == translate(model, tokenizer, [body["q"]])[0]
    client_text = re.search(r'client\.translate\("(.*?)"', python)[1]
    assert printed.getvalue().startswith(translate(model, tokenizer, [client_text])[0] + " [")
    assert "'code': 'en', 'name': 'English', 'targets': ['iso']" in printed.getvalue()


def test_serving_the_two_demo_models_says_how_each_is_reached(demo_workspace) -> None:
    """`encdec serve` with both demo models, as a new user tries it: the start-up names the second (of the pair the
    first serves) and how to ask for it; /libretranslate/languages lists en -> iso, and en -> iso translates."""
    runs = demo_workspace / "runs"
    with ServeProcess("--model", str(runs / "demo-transformer"), "--model", str(runs / "demo-lstm-bahdanau")) as server:
        output = "".join(server.output)
        _, listed, _ = request(f"{server.url}/libretranslate/languages")
        status, _, _ = request(f"{server.url}/libretranslate/translate", {"q": demo.EXAMPLE, "source": "en",
                                                                          "target": "iso"})
    assert f"encdec serve: {runs / 'demo-lstm-bahdanau'} translates en-iso, which the model listed first for it " \
           "serves; it answers the requests that name it (model=demo-lstm-bahdanau)\n" in output
    assert [(entry["code"], entry["targets"]) for entry in listed] == [("en", ["iso"]), ("iso", [])]
    assert status == 200
