"""After training: the final weights (the best checkpoint, or with ``training.average_last`` the average of the last
snapshots when validation prefers it) and the results every run writes to ``eval_results.json``."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from datasets import DatasetDict
from transformers import Seq2SeqTrainer

from ..decoding_options import shipped_search
from ..errors import EncdecError
from ..folders import WEIGHTS_NAME
from ..processes import process_state
from .averaging import average_state_dicts, load_weights, snapshot_folders, snapshot_step
from .callbacks import TrainingClock
from .config import RunConfig, TrainingSettings

logger = logging.getLogger(__name__)


def check_averaging(settings: TrainingSettings, has_eval: bool) -> None:
    """``average_last`` needs a snapshot interval and a validation split to choose on."""
    n = settings.average_last
    if n == 0:
        return
    if n < 2:
        raise EncdecError(f"`training.average_last`={n}: use 0 (no averaging) or the number of snapshots to average "
                          "(2 or more, e.g. 3).")
    if settings.average_every is None or settings.average_every < 1:
        raise EncdecError(f"`training.average_every`={settings.average_every}: `training.average_last` needs the "
                          "number of steps between weight snapshots, e.g. 300.")
    if not has_eval:
        raise EncdecError("`training.average_last` keeps the average only when it scores better on the validation "
                          "split, and this run has none: add a validation split to `data.splits`, or set "
                          "`training.average_last` to 0.")


def _validation_score(trainer: Seq2SeqTrainer, validation, metric: str, search: dict[str, Any]) -> dict[str, float]:
    metrics = trainer.evaluate(validation, metric_key_prefix="validation", **search)
    scores = {k.removeprefix("validation_"): v for k, v in metrics.items()}
    if metric not in scores:
        raise EncdecError(f"The validation metrics {sorted(scores)} lack `training.metric_for_best_model`={metric}.")
    return scores


def average_or_best(trainer: Seq2SeqTrainer, validation, settings: TrainingSettings, snapshot_dir: Path,
                    search: dict[str, Any]) -> dict[str, Any]:
    """``training.average_last``: score the model Trainer ended with (the best checkpoint) and the average of the last
    snapshots on the validation split, decoding with ``search`` (the run's beam size, ``shipped_search``: the decoding
    the model ships with, which may prefer other weights than the greedy validation during training); leave the
    better one in ``trainer.model`` and return the record for ``averaging.json``, ``search`` included. Averaging
    follows Vaswani et al. (2017, Sec. 6.1); the choice is made on validation data only, so the test split never
    picks the weights."""
    process_state().wait_for_everyone()  # the main process has written the last snapshot
    metric, model = settings.metric_for_best_model, trainer.model
    snapshots = snapshot_folders(snapshot_dir)[-settings.average_last:]
    best_step = trainer.state.best_model_checkpoint or f"checkpoint-{trainer.state.global_step}"
    record: dict[str, Any] = {"average_last": settings.average_last, "average_every": settings.average_every,
                              "metric": metric, "snapshots": [str(path) for path in snapshots],
                              "steps": [snapshot_step(path) for path in snapshots],
                              "best_checkpoint_step": int(Path(best_step).name.split("-")[-1]),
                              **search}
    best = _validation_score(trainer, validation, metric, search)
    if len(snapshots) < 2:
        logger.warning("training.average_last: only %d snapshot(s) in %s, so nothing was averaged; the run was "
                       "shorter than average_every=%s steps.", len(snapshots), snapshot_dir, settings.average_every)
        return {**record, "validation": {"best_checkpoint": best}, "chosen": "best_checkpoint"}
    if len(snapshots) < settings.average_last:
        logger.warning("training.average_last=%d, but the run left %d snapshots; averaging those.",
                       settings.average_last, len(snapshots))
    kept = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    load_weights(model, average_state_dicts([path / WEIGHTS_NAME for path in snapshots]), snapshots[-1])
    averaged = _validation_score(trainer, validation, metric, search)
    better = averaged[metric] < best[metric] if metric == "loss" else averaged[metric] > best[metric]
    chosen = "average" if better else "best_checkpoint"
    if not better:
        load_weights(model, kept, Path(best_step))
    logger.info("validation %s: best checkpoint %.4g, average of steps %s %.4g: keeping the %s", metric, best[metric],
                record["steps"], averaged[metric], chosen.replace("_", " "))
    record.update(validation={"best_checkpoint": best, "average": averaged}, chosen=chosen)
    return record


def final_results(trainer: Seq2SeqTrainer, tokenized: DatasetDict, config: RunConfig, counts: dict, train_output,
                  snapshot_dir: Path) -> dict[str, Any]:
    """After training: the final weights (the best checkpoint, or with ``average_last`` the average of the last
    snapshots when validation prefers it) and their validation and test scores."""
    [clock] = [callback for callback in trainer.callback_handler.callbacks if isinstance(callback, TrainingClock)]
    before = clock.seconds  # the attempts before this one, up to the checkpoint it resumed from
    total = None if before is None else before + train_output.metrics["train_runtime"]
    results: dict[str, Any] = {"train": {**train_output.metrics, "train_runtime_total": total,
                                         "resumed_at_step": clock.first_step - 1 or None,
                                         "global_step": train_output.global_step,
                                         "threads": torch.get_num_threads()},  # per process (encdec.threads)
                               "data": counts, "config": dataclasses.asdict(config)}
    if config.training.average_last:
        results["averaging"] = average_or_best(trainer, tokenized["validation"], config.training, snapshot_dir,
                                               shipped_search(config.generation))
        chosen = results["averaging"]
        results["train"]["final_weights"] = (f"average of the steps {', '.join(map(str, chosen['steps']))}"
                                             if chosen["chosen"] == "average" else
                                             f"checkpoint of step {chosen['best_checkpoint_step']}")
    for split in ("validation", "test"):
        if split in tokenized and split not in results:
            metrics = trainer.evaluate(tokenized[split], metric_key_prefix=split)
            results[split] = {k.removeprefix(f"{split}_"): v for k, v in metrics.items()}
    return results
