"""One training run, end to end: run config -> tokenizer, datasets, model -> ``EncdecTrainer`` -> a model folder.

The run's tokenizer is configured, saved by a resumed run, reused from the cache, or trained on the training split
(``get_tokenizer``, with ``encdec.tokenization``, the package's home for tokenizers); its splits become token ids in
``tokenize_splits`` (``encdec.data.token_ids``, cached)."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator
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

from ..data import (
    MULTILINGUAL_COLUMNS,
    DataSpec,
    balanced_sample,
    direction_rows,
    format_report,
    load_data,
    sample_by_temperature,
    tokenize_dataset,
    trained_tokenizer_folder,
)
from ..errors import EncdecError
from ..io_utils import WriterLock, publish_folder
from ..metrics import build_compute_metrics
from ..processes import is_main_process, process_state
from ..progress import TrainingProgress, quiet_transformers_bars
from ..tokenization import load_tokenizer, tokenizer_languages, train_tokenizer
from .arguments import check_token_batching, training_arguments
from .averaging import WeightSnapshots
from .callbacks import CheckpointStopPoint, StopOnCtrlC, TrainingClock
from .config import RunConfig, TrainingSettings
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
from .trainer import EncdecTrainer

logger = logging.getLogger(__name__)


def training_texts(train_split: Any, batch_size: int = 10_000) -> Iterator[str]:
    """Every source, then every target sentence of the training split, read batch by batch from its memory-mapped
    columns (a tokenizer is trained on them without holding the corpus as a list)."""
    for column in ("source", "target"):
        for batch in train_split.select_columns([column]).iter(batch_size=batch_size):
            yield from batch[column]


def run_languages(data: DataSpec, train_split: Any) -> list[str] | None:
    """The languages of a multilingual run, in the model's order: ``data.languages``, else those of the training
    split's directions in the order they first appear; None for bilingual data."""
    if not data.multilingual:
        return None
    if data.languages:
        return list(data.languages)
    return list(dict.fromkeys(lang for direction in direction_rows(train_split) for lang in direction))


def tokenizer_texts(train_split: Any, languages: list[str] | None, seed: int = 0) -> Iterator[str]:
    """What a run's tokenizer is trained on: the whole training split for bilingual data; for multilingual data a
    balanced sample, as many distinct sentences of each language (``data.directions.balanced_sample``), so that a
    large language does not crowd a small one out of the joint vocabulary."""
    if languages is None:
        return training_texts(train_split)
    return itertools.chain.from_iterable(balanced_sample(train_split, seed=seed).values())


def check_tokenizer_languages(tokenizer: Any, languages: list[str] | None, where: str) -> Any:
    """A given tokenizer (``tokenizer.path``) for multilingual data must have a token for each of its languages; one
    for bilingual data, none."""
    known = tokenizer_languages(tokenizer)
    if languages is None and known:
        raise EncdecError(f"{where} is multilingual (languages {', '.join(known)}) and the data has one pair; name "
                          "the data's languages (data.languages or data.directions), or give a bilingual tokenizer.")
    if languages is not None and (not known or any(lang not in known for lang in languages)):
        missing = [lang for lang in languages if lang not in (known or [])]
        raise EncdecError(f"{where} has no language token for {', '.join(missing)} (its languages: "
                          f"{', '.join(known or []) or 'none, it is bilingual'}); multilingual data needs a tokenizer "
                          "with a token per language: set tokenizer.path to null to train one.")
    return tokenizer


def get_tokenizer(config: RunConfig, train_split: Any, output_dir: Path):
    """Load the configured tokenizer, reuse the one a resumed run saved or an earlier run trained on the same
    split with the same settings (kept in ``data.cache_dir``), or train one on the training split (for several
    languages, a joint one with a token per language on a balanced sample, ``tokenizer_texts``)."""
    saved = output_dir / TOKENIZER_SUBDIR
    languages = run_languages(config.data, train_split)
    if config.tokenizer.path:
        return check_tokenizer_languages(load_tokenizer(config.tokenizer.path), languages,
                                         f"tokenizer.path {config.tokenizer.path}")
    state = process_state()
    with state.main_process_first():  # several processes: the main one trains and saves it, the others load it
        if (saved / "tokenizer_config.json").is_file():  # saved whole (publish_folder), or not at all
            return load_tokenizer(saved)
        s = config.tokenizer
        settings = {"vocab_size": s.vocab_size, "algorithm": s.algorithm, "pre_tokenizer": s.pre_tokenizer,
                    "min_frequency": s.min_frequency,
                    "model_max_length": max(config.training.max_source_length, config.training.max_target_length)}
        if languages is not None:
            settings["languages"] = languages
        sample = {"balanced_sample_seed": config.data.seed} if languages is not None else {}  # what it was trained on
        cached = trained_tokenizer_folder(train_split, {**settings, **sample}, config.data.cache_dir)
        if (cached / "tokenizer.json").is_file():
            logger.info("tokenizer: reused %s (trained on this training split with these settings)", cached)
            tokenizer = load_tokenizer(cached)
        else:
            tokenizer = train_tokenizer(tokenizer_texts(train_split, languages, config.data.seed), **settings)
            publish_folder(tokenizer.save_pretrained, cached)
        if state.num_processes > 1 and not (saved / "tokenizer_config.json").is_file():
            publish_folder(tokenizer.save_pretrained, saved)
    return tokenizer  # one process: train() saves it to <output_dir>/tokenizer once the run is set up


def first_rows(split: Any, count: int) -> Any:
    """The first ``count`` rows of a validation split (``training.eval_max_samples``); of a multilingual split, the
    first ``count`` of each direction, so that every direction is still scored."""
    if not set(MULTILINGUAL_COLUMNS) <= set(split.column_names):
        return split.select(range(min(count, len(split))))
    rows = sorted(row for found in direction_rows(split).values() for row in found[:count].tolist())
    return split.select(rows)


def tokenize_splits(datasets: DatasetDict, tokenizer, settings: TrainingSettings, data: DataSpec | None = None
                    ) -> tuple[DatasetDict, dict]:
    """Over-long training pairs are filtered (or truncated, per ``overlong``); evaluation splits are only ever
    truncated, so BLEU is always computed on every validation and test sentence. Tokenized on ``data.num_proc``
    processes and cached in ``data.cache_dir`` (``encdec.data.token_ids``)."""
    lengths = (settings.max_source_length, settings.max_target_length)
    data = data or DataSpec()
    where = {"num_proc": data.num_proc, "cache_dir": data.cache_dir}
    train, counts = tokenize_dataset(DatasetDict(train=datasets["train"]), tokenizer, *lengths,
                                     overlong=settings.overlong, **where)
    others = DatasetDict({name: split for name, split in datasets.items() if name != "train"})
    if "validation" in others and settings.eval_max_samples:
        others["validation"] = first_rows(others["validation"], settings.eval_max_samples)
    if others:
        evaluated, eval_counts = tokenize_dataset(others, tokenizer, *lengths, overlong="truncate", **where)
        train.update(evaluated)
        counts.update(eval_counts)
    return train, counts


def build_trainer(config: RunConfig, model: PreTrainedModel, tokenizer: Any, tokenized: DatasetDict,
                  output_dir: Path, snapshot_dir: Path) -> EncdecTrainer:
    """The run's ``EncdecTrainer``: its arguments, validation set, callbacks (early stopping, weight snapshots, the
    progress lines) and checks."""
    eval_set = tokenized.get("validation")  # its first eval_max_samples rows (``first_rows``)
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
    if config.data.multilingual:  # the directions mixed with a temperature (Arivazhagan et al. 2019)
        with process_state().main_process_first():  # the main one writes the draw's index files
            datasets["train"] = sample_by_temperature(datasets["train"], config.data.temperature,
                                                      seed=config.data.seed)
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
