"""One training run, end to end: run config -> tokenizer, datasets, model -> ``EncdecTrainer`` -> a model folder."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from datasets import DatasetDict, disable_progress_bars
from transformers import (
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    PreTrainedModel,
    ProgressCallback,
    set_seed,
)

from ..data import format_report, load_data
from ..errors import EncdecError
from ..io_utils import WriterLock, publish_folder
from ..metrics import build_compute_metrics
from ..processes import is_main_process, process_state
from ..progress import TrainingProgress, quiet_transformers_bars
from .arguments import check_token_batching, training_arguments
from .averaging import WeightSnapshots
from .callbacks import CheckpointStopPoint, StopOnCtrlC, TrainingClock
from .config import RunConfig
from .model import build_model, build_model_config, check_positions, post_ln_warmup_warning
from .publish import save_final_folder
from .results import check_averaging, final_results
from .run_folder import (
    CHECKPOINT_SUBDIR,
    SNAPSHOT_SUBDIR,
    TOKENIZER_SUBDIR,
    checkpoint_to_resume,
    prepare_output_dir,
    run_inputs,
)
from .tokenizer import get_tokenizer, tokenize_splits
from .trainer import EncdecTrainer

logger = logging.getLogger(__name__)


def build_trainer(config: RunConfig, model: PreTrainedModel, tokenizer: Any, tokenized: DatasetDict,
                  output_dir: Path, snapshot_dir: Path) -> EncdecTrainer:
    """The run's ``EncdecTrainer``: its arguments, validation set, callbacks (early stopping, weight snapshots, the
    progress lines) and checks."""
    eval_set = tokenized.get("validation")
    if eval_set is not None and config.training.eval_max_samples:
        eval_set = eval_set.select(range(min(config.training.eval_max_samples, len(eval_set))))
    d_model = getattr(model.config, "d_model", None) or model.config.hidden_size
    args = training_arguments(config, output_dir, d_model, has_eval=eval_set is not None)
    callbacks: list[Any] = [TrainingClock(), CheckpointStopPoint()]
    if config.training.early_stopping_patience and eval_set is not None:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.training.early_stopping_patience))
    check_averaging(config.training, "validation" in tokenized)
    if config.training.average_last:
        callbacks.append(WeightSnapshots(snapshot_dir, config.training.average_every, config.training.average_last))
    trainer = EncdecTrainer(
        model=model, args=args, train_dataset=tokenized["train"], eval_dataset=eval_set,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer), callbacks=callbacks, max_tokens=config.training.max_tokens,
    )
    if not args.disable_tqdm:  # one bar and readable log lines (encdec.progress), not raw dicts and sub-bars
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(TrainingProgress(label=output_dir.resolve().name))  # the bar names the run
    if config.training.average_last and trainer.is_fsdp_enabled:
        raise EncdecError("`training.average_last` does not support FSDP runs (each process holds a shard); set it "
                          "to 0 and average checkpoints afterwards with `encdec average`.")
    return trainer


def train(config: RunConfig) -> dict:
    """Run one training job and return the evaluation results (also written to ``eval_results.json``). One run at a
    time writes an output folder: the main process holds ``OUTPUT_DIR.lock`` beside it (``io_utils.WriterLock``),
    and a second run into the same folder is refused, naming the first one's PID."""
    output_dir = Path(config.training.output_dir)
    lock = WriterLock(output_dir.with_name(output_dir.name + ".lock"), f"The output folder {output_dir}")
    with lock if is_main_process() else contextlib.nullcontext():
        return train_holding_the_lock(config)


def train_holding_the_lock(config: RunConfig) -> dict:
    """``train``, once its output folder is this run's."""
    set_seed(config.training.seed)
    if not is_main_process():  # several processes: one copy of the progress bars, the main one's
        disable_progress_bars()
    check_token_batching(config.training)  # before anything is written
    output_dir = prepare_output_dir(config.training, run_inputs(config))
    with process_state().main_process_first():  # several processes: the main one fills the datasets cache
        datasets = load_data(config.data)
    tokenizer = get_tokenizer(config, datasets["train"], output_dir)
    model_config = build_model_config(config, tokenizer)
    check_positions(config, model_config)
    if (warning := post_ln_warmup_warning(model_config, config.training)) and is_main_process():
        logger.warning(warning)
    model = build_model(model_config, config.generation, tokenizer)
    with process_state().main_process_first():  # the main one tokenizes and caches; the others load its cache
        tokenized, counts = tokenize_splits(datasets, tokenizer, config.training, config.data)
    logger.info("data: %s", format_report(counts))
    snapshot_dir = output_dir / CHECKPOINT_SUBDIR / SNAPSHOT_SUBDIR
    trainer = build_trainer(config, model, tokenizer, tokenized, output_dir, snapshot_dir)
    resume = checkpoint_to_resume(config.training, output_dir)
    # saved only now (a setup error leaves output_dir empty), and whole or not at all (a kill leaves no half folder)
    if not config.tokenizer.path and not (output_dir / TOKENIZER_SUBDIR / "tokenizer_config.json").is_file() \
            and is_main_process():
        publish_folder(tokenizer.save_pretrained, output_dir / TOKENIZER_SUBDIR)
    stop_on_ctrl_c = StopOnCtrlC()
    trainer.add_callback(stop_on_ctrl_c)
    with quiet_transformers_bars(), stop_on_ctrl_c:  # checkpoints and the final folder: no "Writing shards" bar
        train_output = trainer.train(resume_from_checkpoint=resume)
        results = final_results(trainer, tokenized, config, counts, train_output, snapshot_dir)
        if config.data.distilled_from:  # encdec distill: the model card names the teacher
            results["train"]["distilled_from"] = config.data.distilled_from
        # FSDP (GPUs only): every process takes part in gathering the sharded weights, the main one saves them
        full_state = trainer.accelerator.get_state_dict(trainer.model) if trainer.is_fsdp_enabled else None
        if is_main_process():
            save_final_folder(trainer, tokenizer, output_dir, results, config, state_dict=full_state)
    return results
