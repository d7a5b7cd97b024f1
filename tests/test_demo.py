"""``make demo`` (``encdec demo``) runs from any folder: its run configs are package data."""

from __future__ import annotations

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

from encdec.inference import plotting
from encdec.recipes import demo
from encdec_cli import main
from test_serve import request, serve_app


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
