"""The finished model folder, written atomically: model, tokenizer, generation config, code, results and card."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from transformers import Seq2SeqTrainer

from ..cards import data_languages, training_summary, write_model_card
from ..data import DataSpec
from ..folders import save_for_pipeline
from ..io_utils import atomic_write_json
from ..parallel import unsharded_copy
from .config import RunConfig


def dataset_name(spec: DataSpec) -> str:
    """A human-readable name of the training data for the model card."""
    if spec.format == "builtin_dates" and spec.multilingual:
        return "encdec built-in multilingual dates (German, English, French and ISO 8601 dates, any into any other)"
    if spec.format == "builtin_dates":
        return "encdec built-in dates (human-readable dates -> ISO 8601)"
    if spec.format == "hub":
        return spec.hub_name or "hub dataset"
    return spec.data_dir or ", ".join(str(f) for f in (spec.files or {}).values()) or spec.format


def save_final_folder(trainer: Seq2SeqTrainer, tokenizer, output_dir: Path, results: dict, config: RunConfig,
                      state_dict: dict | None = None) -> None:
    """Write the model folder atomically: everything goes to a temporary sibling first, then each file is moved
    into ``output_dir`` with ``os.replace``. Only the main process writes. ``state_dict``: the gathered full weights
    of a sharded (FSDP) model, saved through an unsharded copy."""
    staging_root = output_dir / ".final-tmp"
    shutil.rmtree(staging_root, ignore_errors=True)
    staging = staging_root / output_dir.resolve().name  # the model card names the model after its folder
    model = trainer.model
    if state_dict is not None:
        model = unsharded_copy(trainer.accelerator.unwrap_model(model), state_dict)
    save_for_pipeline(model, tokenizer, staging)  # model, tokenizer, generation config, code, custom_pipelines
    atomic_write_json(staging / "eval_results.json", results)
    if "averaging" in results:
        atomic_write_json(staging / "averaging.json", results["averaging"])
    split = "test" if "test" in results else "validation"
    metrics = {"split": split, **results[split]} if split in results else None
    write_model_card(staging, metrics=metrics, dataset_name=dataset_name(config.data),
                     dataset_id=config.data.hub_name if config.data.format == "hub" else None,
                     training_summary=training_summary(results["train"]),
                     languages=list(getattr(model.config, "languages", None) or [])
                     or data_languages(dataclasses.asdict(config.data)))
    for item in sorted(staging.iterdir(), key=lambda item: item.name == "eval_results.json"):  # it last: the
        target = output_dir / item.name  # sign of a finished folder (encdec distill relies on it)
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(item, target)
    staging.rmdir()
    staging_root.rmdir()
