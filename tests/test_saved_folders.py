"""Folders saved by earlier encdec versions load with today's code, with every weight in place, and give the same
logits and the same tokens, on every transformers release the suite runs on. Each fixture folder holds the
make_fixture.py that made it and says at which commit:

- pre_refactor: before the layers were renamed and reorganised (weights under older names);
- before_cache_rename: saved with transformers 5.23, before the models took 5.24's `cache` argument and the RNN state
  became a transformers recurrent-state cache layer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import encdec  # noqa: F401  (registers both families with the Auto classes)
from remote_code import BLOCK_ENCDEC

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = {fixture: json.loads((FIXTURES / fixture / "expected.json").read_text())
            for fixture in ("pre_refactor", "before_cache_rename")}


@pytest.mark.parametrize(("fixture", "name"), [(fixture, name) for fixture, expected in EXPECTED.items()
                                               for name in sorted(expected["models"])])
@torch.no_grad()
def test_a_folder_saved_before_loads_and_generates_the_same(fixture: str, name: str) -> None:
    model, info = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / fixture / name, output_loading_info=True)
    assert not any(info.values()), f"loading reported {info}"
    model.eval()
    expected = EXPECTED[fixture]["models"][name]
    inputs = {key: torch.tensor(EXPECTED[fixture][key]) for key in ("input_ids", "attention_mask")}
    logits = model(**inputs, decoder_input_ids=torch.tensor(EXPECTED[fixture]["decoder_input_ids"])).logits
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), atol=2e-6, rtol=0)
    assert model.generate(**inputs, max_new_tokens=8).tolist() == expected["greedy"]
    assert model.generate(**inputs, max_new_tokens=8, num_beams=3).tolist() == expected["beam"]


REMOTE_GREEDY = BLOCK_ENCDEC + """
import json  # encdec cannot be imported from here on, as on a machine without it: the folder's own code files run
import torch
from transformers import AutoModelForSeq2SeqLM
inputs = json.loads(sys.argv[1])
for folder in sys.argv[2:]:
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    with torch.no_grad():
        print(json.dumps(model.generate(**{key: torch.tensor(value) for key, value in inputs.items()},
                                        max_new_tokens=8).tolist()))
"""
RESAVED = ["transformer-post-ln", "rnn-luong-general-gru"]


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_an_old_folder_saved_again_runs_without_encdec(tmp_path: Path) -> None:
    """The remedy docs/compatibility.md gives for a folder whose copied code predates a transformers change: load it
    with encdec and save it again; the new folder's code then generates the same tokens without encdec (both
    families' folders in one process without encdec: the interpreter and torch start once)."""
    expected = EXPECTED["before_cache_rename"]
    for name in RESAVED:
        model = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / "before_cache_rename" / name)
        model.save_pretrained(tmp_path / name)
        assert (tmp_path / name / "compat.py").is_file()
    inputs = json.dumps({key: expected[key] for key in ("input_ids", "attention_mask")})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    done = subprocess.run([sys.executable, "-c", REMOTE_GREEDY, inputs, *(str(tmp_path / name) for name in RESAVED)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.strip().splitlines()[-len(RESAVED):]
    for name, tokens in zip(RESAVED, printed, strict=True):
        assert json.loads(tokens) == expected["models"][name]["greedy"], name
