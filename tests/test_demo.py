"""``make demo`` (``encdec demo``) runs from any folder: its run configs are package data."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def test_the_demo_runs_outside_the_repository(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "encdec", "demo", "--max-steps", "2", "--runs-dir", "runs"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
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
    serve_line = done.stdout.strip().splitlines()[-1]
    assert_serves(shlex.split(serve_line), cwd=tmp_path, env=env)


def assert_serves(command: list[str], cwd: Path, env: dict) -> None:
    """The printed serve command starts a server that answers (on a free loopback port, then stopped)."""
    assert command[1:5] == ["-m", "encdec", "serve", "--model"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*command, "--port", str(port), "--log-level", "warning"], cwd=cwd, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "the demo's serve command did not start"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=60)
