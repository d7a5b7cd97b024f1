"""Tiny random model folders (model + tokenizer, as ``save_pretrained`` writes them) for the workflow tests:
one per family (toy.py's ``FOLDER_MODELS``), sharing a tokenizer trained on the built-in date task. Random weights
translate into garbage, which is all these tests need. Also run configs of tiny models for the CLI/training tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from transformers import PreTrainedTokenizerFast

from encdec.data import make_date_pairs
from encdec.tokenization import train_tokenizer
from toy import FOLDER_MODELS, folder_model

FAMILIES = tuple(FOLDER_MODELS)  # ("transformer", "rnn")


def date_tokenizer(num_pairs: int = 300, vocab_size: int = 120) -> PreTrainedTokenizerFast:
    pairs = make_date_pairs(num_pairs, seed=0)
    return train_tokenizer([text for pair in pairs for text in pair], vocab_size=vocab_size)


def save_folder(model, tokenizer: PreTrainedTokenizerFast, path: Path) -> Path:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_model_folders(root: Path) -> dict[str, Path]:
    """``{"transformer": dir, "rnn": dir}`` under ``root``."""
    tokenizer = date_tokenizer()
    return {family: save_folder(folder_model(family, tokenizer), tokenizer, root / family) for family in FAMILIES}


REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIGS = {"transformer": "demo-transformer.yaml", "rnn": "demo-lstm-bahdanau.yaml"}


def write_tiny_run_config(path: Path, family: str, model: dict, sections: dict[str, dict]) -> Path:
    """Write ``path``: the family's demo run config with the tiny ``model`` JSON written beside it, greedy decoding
    of at most 12 tokens, and each of ``sections`` merged over the demo's section (a ``data`` section that names a
    ``format`` replaces the built-in one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    model_path = path.parent / f"{family}.json"
    model_path.write_text(json.dumps(model))
    config = yaml.safe_load((REPO_ROOT / "configs" / DEMO_CONFIGS[family]).read_text())
    config["model"] = str(model_path)
    config["generation"].update(num_beams=1, max_new_tokens=12)
    for section, values in sections.items():
        if section == "data" and "format" in values:
            config["data"] = dict(values)
        else:
            config.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(config))
    return path
