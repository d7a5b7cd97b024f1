"""Folders saved by an earlier encdec (tests/fixtures/pre_refactor, made at commit 9130e98 by make_fixture.py there)
load with today's code, with every weight in place, and give the same logits and the same tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import encdec  # noqa: F401  (registers both families with the Auto classes)

FIXTURES = Path(__file__).parent / "fixtures" / "pre_refactor"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED["models"]))
@torch.no_grad()
def test_a_folder_saved_before_loads_and_generates_the_same(name: str) -> None:
    model, info = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / name, output_loading_info=True)
    assert not any(info.values()), f"loading reported {info}"
    model.eval()
    expected = EXPECTED["models"][name]
    inputs = {key: torch.tensor(EXPECTED[key]) for key in ("input_ids", "attention_mask")}
    logits = model(**inputs, decoder_input_ids=torch.tensor(EXPECTED["decoder_input_ids"])).logits
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), atol=2e-6, rtol=0)
    assert model.generate(**inputs, max_new_tokens=8).tolist() == expected["greedy"]
    assert model.generate(**inputs, max_new_tokens=8, num_beams=3).tolist() == expected["beam"]
