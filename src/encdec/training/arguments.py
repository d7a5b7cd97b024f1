"""The run config's training section as ``Seq2SeqTrainingArguments``: the learning-rate schedule, reporting, length
grouping across transformers releases, and the batching checks made before anything is written."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import torch
from transformers import Seq2SeqTrainingArguments

from ..errors import EncdecError
from ..processes import cpu_processes
from .config import RunConfig, TrainingSettings
from .run_folder import CHECKPOINT_SUBDIR


def resolve_learning_rate(settings: TrainingSettings, d_model: int) -> tuple[float, str]:
    """Vaswani et al. 2017, Eq. 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5). That is Trainer's
    ``inverse_sqrt`` schedule (linear warm-up, then 1/sqrt decay) with the peak d_model^-0.5 * warmup^-0.5."""
    if settings.lr_scheduler_type != "vaswani":
        if settings.learning_rate is None:
            raise EncdecError("`training.learning_rate` is required unless `training.lr_scheduler_type` is vaswani.")
        return settings.learning_rate, settings.lr_scheduler_type
    peak = settings.lr_factor * d_model**-0.5 * max(settings.warmup_steps, 1) ** -0.5
    return (settings.learning_rate or peak), "inverse_sqrt"


def report_to(setting: str) -> list[str]:
    if setting == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") else []
    return [] if setting == "none" else [setting]


def length_grouping(enabled: bool) -> dict[str, Any]:
    """The Trainer argument that batches pairs of similar source length (LengthGroupedSampler): recent transformers
    releases name it ``train_sampling_strategy="group_by_length"``, older ones ``group_by_length=True``."""
    if "train_sampling_strategy" in {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)}:
        return {"train_sampling_strategy": "group_by_length" if enabled else "random"}
    return {"group_by_length": enabled}


def training_arguments(config: RunConfig, output_dir: Path, d_model: int, has_eval: bool) -> Seq2SeqTrainingArguments:
    s = config.training
    if s.eval_num_beams is not None and s.eval_num_beams < 1:
        raise EncdecError(f"`training.eval_num_beams`={s.eval_num_beams} must be at least 1 (1 = greedy), or null to "
                          "use `generation.num_beams`.")
    learning_rate, scheduler = resolve_learning_rate(s, d_model)
    eval_strategy = s.eval_strategy if has_eval else "no"
    return Seq2SeqTrainingArguments(
        output_dir=str(output_dir / CHECKPOINT_SUBDIR),
        seed=s.seed,
        num_train_epochs=s.num_train_epochs,
        max_steps=s.max_steps,
        per_device_train_batch_size=s.per_device_train_batch_size,
        per_device_eval_batch_size=s.per_device_eval_batch_size,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        learning_rate=learning_rate,
        lr_scheduler_type=scheduler,
        warmup_steps=s.warmup_steps,
        weight_decay=s.weight_decay,
        adam_beta1=s.adam_beta1,
        adam_beta2=s.adam_beta2,
        adam_epsilon=s.adam_epsilon,
        max_grad_norm=s.max_grad_norm,
        label_smoothing_factor=s.label_smoothing,
        eval_strategy=eval_strategy,
        eval_steps=s.eval_steps,
        save_strategy=eval_strategy if eval_strategy != "no" else "epoch",
        save_steps=s.eval_steps,
        save_total_limit=s.save_total_limit,
        load_best_model_at_end=eval_strategy != "no",
        metric_for_best_model=s.metric_for_best_model if eval_strategy != "no" else None,
        greater_is_better=s.metric_for_best_model != "loss",
        predict_with_generate=True,
        generation_num_beams=s.eval_num_beams or config.generation.num_beams,
        generation_max_length=None,
        logging_steps=s.logging_steps,
        report_to=report_to(s.report_to),
        bf16=s.bf16,
        dataloader_num_workers=s.dataloader_num_workers,
        **length_grouping(s.group_by_length),
        ddp_find_unused_parameters=False,  # every parameter of both families gets a gradient
        dataloader_pin_memory=torch.cuda.is_available(),
        use_cpu=cpu_processes(),  # under a launcher without a GPU: join the processes on the CPU (gloo)
        log_level_replica="error",  # several processes: warnings once, from the main process
    )


def check_token_batching(settings: TrainingSettings) -> None:
    """``max_tokens`` must hold the longest pair the length limits allow, and replaces ``group_by_length``."""
    if settings.max_tokens is None:
        return
    longest = max(settings.max_source_length, settings.max_target_length)
    if settings.max_tokens < longest:
        raise EncdecError(f"training.max_tokens={settings.max_tokens} is smaller than the longest pair the length "
                          f"limits allow ({longest} tokens: training.max_source_length={settings.max_source_length}, "
                          f"max_target_length={settings.max_target_length}); raise max_tokens to {longest} or more, "
                          "or lower the limits.")
    if settings.group_by_length:
        raise EncdecError("training.max_tokens already batches pairs of similar length; set training.group_by_length "
                          "to false (or drop max_tokens for fixed batches of per_device_train_batch_size).")
