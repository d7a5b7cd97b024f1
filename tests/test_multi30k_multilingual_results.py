"""scripts/multi30k_multilingual_results.py: the multilingual model's rows beside its bilingual baselines, the
difference per direction, the speed ratio, and whether the goal (as good on average, no direction more than 1 BLEU
worse) is met, from run folders as scripts/multi30k_multilingual.sh leaves them."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import save_file

from tiny_model_folders import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"
SIGNATURES = {"bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
              "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"}


@pytest.fixture()
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # it imports multi30k_results, beside it
    spec = importlib.util.spec_from_file_location("multi30k_multilingual_results",
                                                  SCRIPTS / "multi30k_multilingual_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_model(folder, bleu: dict[str, float], speed: float, steps: int) -> None:
    folder.mkdir(parents=True)
    for direction, score in bleu.items():
        for beams, minus in ((5, 0.0), (1, 1.5)):
            (folder / f"test2016-{direction}-beam{beams}.json").write_text(json.dumps(
                {"bleu": score - minus, "chrf": score + 20, "sentences_per_second": speed, **SIGNATURES}))
    (folder / "eval_results.json").write_text(json.dumps({"train": {"global_step": steps, "train_runtime": 60.0}}))
    save_file({"w": torch.zeros(100, 10)}, str(folder / "model.safetensors"))


def runs(tmp_path, multilingual: dict[str, float]) -> None:
    fake_model(tmp_path / "multilingual", multilingual, 30.0, 4800)
    for direction in ("de-en", "en-de"):
        fake_model(tmp_path / f"bilingual-{direction}", {direction: 30.0}, 40.0, 800)


def written(script, tmp_path, monkeypatch) -> str:
    output = tmp_path / "results.md"
    output.write_text("<!-- begin: multilingual -->\n<!-- end: multilingual -->\n"
                      "<!-- begin: multilingual-cost -->\n<!-- end: multilingual-cost -->\n")
    monkeypatch.setattr("sys.argv", ["x", "--runs", str(tmp_path), "--output", str(output)])
    script.main()
    return output.read_text()


def test_rows_side_by_side_with_the_difference_and_the_speed_ratio(script, tmp_path, monkeypatch) -> None:
    runs(tmp_path, {"de-en": 31.0, "en-de": 29.5, "de-fr": 20.0})
    text = written(script, tmp_path, monkeypatch)
    assert "| de-en | 31.00 | 30.00 | +1.00 | 29.50 | 28.50 | 51.00 | 50.00 | 30.0 | 40.0 | 0.75 |" in text
    assert "| de-fr | 20.00 | - | - | 18.50 | - | 40.00 | - | 30.0 | - | - |" in text
    assert "| fr-en |" not in text  # scored by no model: an old row would stay
    assert "+0.25 BLEU (beam 5) on average, and -0.50 on its worst direction (en-de)" in text and "is met." in text
    assert "| multilingual (`multi30k-multilingual-cpu`) | 12 | 0.00M | 4,800 | 1.0 min |" in text
    assert "| the 2 bilingual models together | 2 | - | 1,600 | 2.0 min |" in text


def test_a_direction_more_than_one_bleu_worse_misses_the_goal(script, tmp_path, monkeypatch) -> None:
    runs(tmp_path, {"de-en": 33.0, "en-de": 28.5})
    text = written(script, tmp_path, monkeypatch)
    assert "+0.75 BLEU (beam 5) on average, and -1.50 on its worst direction (en-de)" in text and "is missed." in text
