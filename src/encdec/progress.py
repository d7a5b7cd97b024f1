"""What a training run shows: one progress bar, and a readable line for each log, in place of Trainer's raw dicts and
its evaluation sub-bars.

    step 400/800: loss 1.472, lr 1.00e-03
    step 400/800, validation: BLEU 93.44, chrF 93.84, loss 1.242 (1.7 s)
    trained 800 steps in 3.7 min (3.56 steps/s); mean training loss 1.904
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm
from transformers import TrainerCallback
from transformers.utils import logging as transformers_logging

# how a logged metric is named on the line, in order (those not listed follow as logged)
METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF", "loss": "loss", "gen_len": "output length"}
SKIPPED = {"epoch", "total_flos", "grad_norm", "runtime", "samples_per_second", "steps_per_second"}


def format_log(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """One line for a Trainer log: training loss and rate, an evaluation's scores, or the run's summary."""
    if "train_runtime" in logs:
        minutes = logs["train_runtime"] / 60
        return (f"trained {step} steps in {minutes:.1f} min ({logs.get('train_steps_per_second', 0):.2f} steps/s); "
                f"mean training loss {logs.get('train_loss', float('nan')):.4g}")
    where = f"step {step}/{max_steps}"
    if "loss" in logs:
        return f"{where}: loss {logs['loss']:.4g}, lr {logs.get('learning_rate', float('nan')):.2e}"
    prefix = next((key.split("_")[0] for key in logs if key.endswith("_runtime")), None)
    if prefix is None:
        return None
    metrics = {key.removeprefix(f"{prefix}_"): value for key, value in logs.items() if key.startswith(f"{prefix}_")}
    split = "validation" if prefix == "eval" else prefix
    return f"{where}, {split}: {format_scores(metrics)} ({metrics['runtime']:.3g} s)"


def format_scores(metrics: dict[str, Any]) -> str:
    """``BLEU 93.44, chrF 93.84, loss 1.242, ...``: the scores of one evaluation, the named ones first. A
    multilingual model's per-direction scores (``de-en_bleu``, ...) follow as their BLEU alone, ``; BLEU by
    direction: de-en 91.2, ...`` (the others are in the results file)."""
    by_direction = {name: name[:-len("_bleu")] for name in metrics if name.endswith("_bleu") and "-" in name}
    per_direction = {name for name in metrics for direction in by_direction.values()
                     if name.startswith(f"{direction}_")}
    ordered = [name for name in METRIC_NAMES if name in metrics]
    ordered += [name for name in metrics if name not in METRIC_NAMES and name not in SKIPPED | per_direction]
    line = ", ".join(f"{METRIC_NAMES.get(name, name)} {metrics[name]:.4g}" for name in ordered
                     if isinstance(metrics[name], int | float) and not isinstance(metrics[name], bool))
    if by_direction:
        line += "; BLEU by direction: " + ", ".join(f"{direction} {metrics[name]:.4g}"
                                                    for name, direction in by_direction.items())
    return line


class TrainingProgress(TrainerCallback):
    """Trainer's ``ProgressCallback`` without the evaluation sub-bars, with ``format_log`` lines written above the
    bar (main process only). The bar says what it trains, ``Training demo-transformer:  50%|...``: ``label`` names
    the run (``encdec train`` passes its output folder's name), so that the bars of several runs in one terminal
    (``encdec demo`` trains two models) tell which is which."""

    def __init__(self, label: str | None = None) -> None:
        self.description = f"Training {label}" if label else "Training"
        self.bar: tqdm | None = None
        self.step = 0

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero:
            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc=self.description, unit="step",
                            dynamic_ncols=True)
        self.step = state.global_step

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.bar is not None:
            self.bar.update(state.global_step - self.step)
        self.step = state.global_step

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, **kwargs) -> None:
        line = format_log(logs or {}, state.global_step, state.max_steps) if state.is_world_process_zero else None
        if line is not None:
            (self.bar.write if self.bar is not None else print)(line)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@contextmanager
def quiet_transformers_bars() -> Iterator[None]:
    """transformers' own progress bars off for the block ("Loading weights" on every model load, "Writing model
    shards" on every checkpoint: noise on a local folder of one file), then as they were."""
    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()


__all__ = ["TrainingProgress", "format_log", "format_scores", "quiet_transformers_bars"]
