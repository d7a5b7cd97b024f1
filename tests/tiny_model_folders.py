"""Tiny random model folders (model + tokenizer, as ``save_pretrained`` writes them) for the workflow tests:
one per family (toy.py's ``FOLDER_MODELS``), sharing a tokenizer trained on the built-in date task. Random weights
translate into garbage, which is all these tests need. Also run configs of tiny models for the CLI/training tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
import yaml
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from encdec.data import make_date_pairs
from encdec.tokenization import special_token_ids, train_tokenizer
from toy import FOLDER_MODELS, folder_model, linear_schedule, tiny_model, train_loop

FAMILIES = tuple(FOLDER_MODELS)  # ("transformer", "rnn")


def date_tokenizer(num_pairs: int = 300, vocab_size: int = 120) -> PreTrainedTokenizerFast:
    pairs = make_date_pairs(num_pairs, seed=0)
    return train_tokenizer([text for pair in pairs for text in pair], vocab_size=vocab_size)


DatePairs = list[tuple[str, str]]
# the models trained on dates by the engine and server tests
DATE_TRANSFORMER = {"model_type": "transformer_seq2seq", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
                    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
                    "decoder_ffn_dim": 128, "dropout": 0.0, "max_position_embeddings": 64}
DATE_RNN = {"model_type": "rnn_seq2seq", "cell_type": "lstm", "attention": "bahdanau", "embedding_dim": 32,
            "hidden_size": 64, "encoder_layers": 1, "decoder_layers": 1, "bidirectional_encoder": True,
            "bridge": "linear_tanh", "dropout": 0.0}


def date_data() -> tuple[PreTrainedTokenizerFast, DatePairs, DatePairs]:
    """A tokenizer, 4,000 training pairs and 200 held-out ones (none of them in training)."""
    tokenizer = date_tokenizer(num_pairs=2000, vocab_size=160)
    train = make_date_pairs(4000, seed=1)
    seen = set(train)
    test = [pair for pair in make_date_pairs(400, seed=99) if pair not in seen][:200]
    return tokenizer, train, test


# train_on_dates' models, by what they were trained from: several test files train the same one
_TRAINED: dict[tuple, PreTrainedModel] = {}


def train_on_dates(config: dict, dates: tuple[PreTrainedTokenizerFast, DatePairs, DatePairs], steps: int,
                   lr: float) -> PreTrainedModel:
    """A tiny model of ``config`` trained for ``steps`` batches of 64 date pairs (about 10 s for 600 steps):
    trained models end their outputs with EOS at varied steps and their beams really compete. Training is
    deterministic, so each (config, tokenizer, pairs, steps, lr) trains once per process: later calls get a copy."""
    tokenizer, pairs, _ = dates
    key = (json.dumps(config, sort_keys=True), tokenizer.backend_tokenizer.to_str(), tuple(pairs), steps, lr)
    if key not in _TRAINED:
        _TRAINED[key] = _train_on_dates(config, tokenizer, pairs, steps, lr)
    return copy.deepcopy(_TRAINED[key])


def _train_on_dates(config: dict, tokenizer: PreTrainedTokenizerFast, pairs: DatePairs, steps: int,
                    lr: float) -> PreTrainedModel:
    model = tiny_model(config, **special_token_ids(tokenizer))

    def batches():
        generator = torch.Generator().manual_seed(0)
        for _ in range(steps):
            picked = [pairs[i] for i in torch.randint(0, len(pairs), (64,), generator=generator).tolist()]
            source = tokenizer([s for s, _ in picked], padding=True, return_tensors="pt")
            labels = tokenizer([t for _, t in picked], padding=True, return_tensors="pt")["input_ids"]
            labels[labels == tokenizer.pad_token_id] = -100
            yield source["input_ids"], source["attention_mask"], labels

    train_loop(model, batches(), lr=lr, schedule=linear_schedule(steps, warmup=50))
    return model.eval()


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
