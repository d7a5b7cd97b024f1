"""Checkpoint averaging: one model whose every weight is the mean of that weight over several checkpoints of a run.

Vaswani et al. (2017, "Attention Is All You Need", Sec. 6.1) report their base Transformers as "a single model
obtained by averaging the last 5 checkpoints"; the average of points along the end of the optimisation path usually
generalises a little better than its last point. fairseq ships the same operation as
``scripts/average_checkpoints.py``, but for fairseq's own checkpoint format; neither transformers nor accelerate
averages saved model folders, hence this short module.

    encdec average runs/X/checkpoints/checkpoint-7500 runs/X/checkpoints/checkpoint-9000 --output runs/X-avg

The same averaging can end a training run: with ``training.average_last: N`` and ``training.average_every: K`` in
the recipe, ``WeightSnapshots`` keeps the weights of every K-th step (and of the last step) of the run, the last N
of them, under ``<output_dir>/checkpoints/snapshots``. After training, ``encdec train`` scores their average and the
best checkpoint on the validation split with the recipe's metric and keeps whichever is better; the final folder's
``averaging.json`` names the snapshots that went in and both validation scores.

The checkpoints must come from one model configuration (the same ``config.json`` up to bookkeeping keys and the same
tensor names, shapes and dtypes); anything else is refused with the file and the field that differ. Floating-point
weights are summed in float64 and cast back; integer buffers must be equal in every checkpoint. The output is a
complete model folder (weights, config, generation config, tokenizer, remote code, ``averaging.json`` naming the
inputs), written to a temporary sibling first and renamed into place, so ``encdec evaluate`` and ``encdec push``
take it as is.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, TrainerCallback

from ..errors import EncdecError, InputFileError
from ..folders import WEIGHTS_NAME, read_json, read_safetensors_shapes, require_dir, save_for_pipeline
from ..io_utils import atomic_write_json, refuse_existing, refuse_overlap, replace_folder
from ..progress import quiet_transformers_bars

# config.json keys that differ between checkpoints of one model without changing it
_BOOKKEEPING_KEYS = {"_name_or_path", "transformers_version", "architectures", "auto_map", "custom_pipelines"}


def _check_same_model(folders: list[Path]) -> None:
    """Refuse checkpoints of different models: their configs, tensor names or shapes differ."""
    first_config = {k: v for k, v in read_json(folders[0] / "config.json", "the model config").items()
                    if k not in _BOOKKEEPING_KEYS}
    first_shapes = read_safetensors_shapes(folders[0] / WEIGHTS_NAME)
    for folder in folders[1:]:
        config = {k: v for k, v in read_json(folder / "config.json", "the model config").items()
                  if k not in _BOOKKEEPING_KEYS}
        differing = sorted(key for key in first_config.keys() | config.keys()
                           if first_config.get(key) != config.get(key))
        if differing:
            key = differing[0]
            raise EncdecError(
                f"{folder / 'config.json'} differs from {folders[0] / 'config.json'} in {differing} (e.g. {key!r}: "
                f"{config.get(key)!r} against {first_config.get(key)!r}); only checkpoints of one model configuration "
                "can be averaged: pass checkpoints of a single run.")
        shapes = read_safetensors_shapes(folder / WEIGHTS_NAME)
        if shapes.keys() != first_shapes.keys():
            odd = sorted(shapes.keys() ^ first_shapes.keys())
            raise EncdecError(f"{folder / WEIGHTS_NAME} and {folders[0] / WEIGHTS_NAME} hold different tensors "
                              f"({odd[:5]}); only checkpoints of one model can be averaged.")
        for name, shape in shapes.items():
            if shape != first_shapes[name]:
                raise EncdecError(f"{folder / WEIGHTS_NAME}: tensor {name!r} has shape {shape}, but "
                                  f"{first_shapes[name]} in {folders[0] / WEIGHTS_NAME}; only checkpoints of one "
                                  "model can be averaged.")


def average_state_dicts(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the safetensors files ``paths`` (same names and shapes): floating-point tensors are
    accumulated in float64 and returned in their stored dtype; any other tensor must be equal in every file."""
    total: dict[str, torch.Tensor] = {}
    first = load_file(str(paths[0]))
    for name, tensor in first.items():
        total[name] = tensor.double() if tensor.is_floating_point() else tensor
    for path in paths[1:]:
        for name, tensor in load_file(str(path)).items():
            if tensor.dtype != first[name].dtype:
                raise EncdecError(f"{path}: tensor {name!r} is {tensor.dtype}, but {first[name].dtype} in {paths[0]}; "
                                  "only checkpoints saved in one dtype can be averaged.")
            if tensor.is_floating_point():
                total[name] += tensor.double()
            elif not torch.equal(tensor, total[name]):
                raise EncdecError(f"{path}: the integer tensor {name!r} differs from {paths[0]}; integer buffers "
                                  "cannot be averaged, so these checkpoints are not of one model.")
    return {name: (tensor / len(paths)).to(first[name].dtype) if tensor.is_floating_point() else tensor
            for name, tensor in total.items()}


def average_checkpoints(checkpoints: Sequence[str | os.PathLike], output_dir: str | os.PathLike,
                        tokenizer_dir: str | os.PathLike | None = None, overwrite: bool = False) -> Path:
    """Average the weights of ``checkpoints`` (model folders or Trainer checkpoints of one model) into a new model
    folder ``output_dir``. The config, generation config and tokenizer come from the last checkpoint (or the
    tokenizer from ``tokenizer_dir``). Returns ``output_dir``."""
    folders, output_dir = [require_dir(path) for path in checkpoints], Path(output_dir)
    _check_request(folders, output_dir, overwrite)
    _check_same_model(folders)
    averaged = average_state_dicts([folder / WEIGHTS_NAME for folder in folders])

    tokenizer_source = Path(tokenizer_dir) if tokenizer_dir is not None else folders[-1]
    if not (tokenizer_source / "tokenizer.json").is_file():
        raise InputFileError(f"{tokenizer_source / 'tokenizer.json'} is missing, so the averaged folder would have no "
                             "tokenizer; pass --tokenizer with the run's tokenizer folder (e.g. runs/X/tokenizer).")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=False)
    with quiet_transformers_bars():
        model = AutoModelForSeq2SeqLM.from_pretrained(folders[-1])  # encdec's registered classes, no remote code
    load_weights(model, averaged, folders[-1] / WEIGHTS_NAME)

    record = {"checkpoints": [str(folder) for folder in folders],
              "steps": [_checkpoint_step(folder) for folder in folders], "tokenizer": str(tokenizer_source)}
    _write_folder(model.eval(), tokenizer, record, output_dir)
    return output_dir


def load_weights(model: PreTrainedModel, weights: dict[str, torch.Tensor], source: Path) -> None:
    """Copy ``weights`` (a saved state dict, tied aliases left out) into ``model`` in place."""
    state = model.state_dict()
    unknown = sorted(set(weights) - set(state))
    if unknown:
        raise EncdecError(f"{source} holds tensors the model does not have ({unknown[:5]}); re-save the checkpoint "
                          "with this version of encdec.")
    with torch.no_grad():
        for name, tensor in weights.items():
            state[name].copy_(tensor)  # state_dict() tensors share storage with the parameters and buffers


def _check_request(folders: list[Path], output_dir: Path, overwrite: bool) -> None:
    """At least two distinct checkpoints, and an output folder apart from them that may be written."""
    if len(folders) < 2:
        raise EncdecError(f"Averaging needs at least 2 checkpoints, got {len(folders)}; pass several checkpoint "
                          "folders of one run, e.g. runs/X/checkpoints/checkpoint-*.")
    if len({folder.resolve() for folder in folders}) != len(folders):
        raise EncdecError("The same checkpoint folder was given twice; each checkpoint may be averaged only once.")
    refuse_overlap(output_dir, folders)  # not a checkpoint, inside one, or around one (--overwrite would delete it)
    refuse_existing(output_dir, overwrite, "output folder", folder=True)


def _write_folder(model, tokenizer, record: dict, output_dir: Path) -> None:
    """Save the averaged model folder (with ``averaging.json``) beside ``output_dir``, then swap it in."""
    def save(staging: Path) -> None:
        save_for_pipeline(model, tokenizer, staging)
        atomic_write_json(staging / "averaging.json", record)

    replace_folder(save, output_dir)


def _checkpoint_step(folder: Path) -> int | None:
    """The Trainer's global step of a checkpoint folder, when it has a ``trainer_state.json``."""
    state = folder / "trainer_state.json"
    if not state.is_file():
        return None
    try:
        return json.loads(state.read_text(encoding="utf-8")).get("global_step")
    except (OSError, json.JSONDecodeError):
        return None


SNAPSHOT_PREFIX = "step-"


def snapshot_folders(folder: Path) -> list[Path]:
    """The complete snapshots ``step-N`` in ``folder`` (``model.safetensors`` present), oldest first."""
    found = [path for path in folder.glob(f"{SNAPSHOT_PREFIX}*") if (path / WEIGHTS_NAME).is_file()
             and path.name.removeprefix(SNAPSHOT_PREFIX).isdigit()]
    return sorted(found, key=snapshot_step)


def snapshot_step(folder: Path) -> int:
    return int(folder.name.removeprefix(SNAPSHOT_PREFIX))


class WeightSnapshots(TrainerCallback):
    """Saves the model (``save_pretrained``: weights, config, generation config) every ``every`` optimiser steps and
    at the last step into ``folder/step-N``, keeping the newest ``keep``: the inputs of ``training.average_last``.

    Unlike Trainer checkpoints these hold no optimiser state (a third of the size) and are independent of
    ``eval_steps`` and ``save_total_limit``. Each snapshot is written to a temporary sibling and renamed into place,
    so an interrupted save never leaves a half-written one. A resumed run drops the snapshots of steps after the one
    it saves, which belonged to the interrupted attempt. Only the main process writes."""

    def __init__(self, folder: Path, every: int, keep: int) -> None:
        self.folder, self.every, self.keep = Path(folder), every, keep

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if not state.is_world_process_zero or (step % self.every and step != state.max_steps):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=".step-", suffix=".tmp"))
        try:
            model.save_pretrained(staging)
            target = self.folder / f"{SNAPSHOT_PREFIX}{step}"
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        snapshots = snapshot_folders(self.folder)
        stale = [path for path in snapshots if snapshot_step(path) > step]
        for path in stale + [path for path in snapshots if path not in stale][:-self.keep]:
            shutil.rmtree(path)
