"""``make demo`` (``encdec demo``) runs from any folder: its run configs are package data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_demo_runs_outside_the_repository(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "encdec", "demo", "--max-steps", "2", "--runs-dir", "runs"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("transformer", "lstm-bahdanau"):
        assert f"\n{name}: exact match " in done.stdout
        assert (tmp_path / "runs" / f"demo-{name}" / "model.safetensors").is_file()
        assert (tmp_path / "runs" / f"attention-{name}.png").read_bytes().startswith(b"\x89PNG")
