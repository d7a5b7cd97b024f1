"""``encdec train``: a run config (YAML) -> tokenizer, datasets, model -> ``Seq2SeqTrainer`` -> a model folder.

No model code lives here. The run config has five sections, each a dataclass below; every key is
documented in ``configs/*.yaml``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict, disable_progress_bars
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    GenerationConfig,
    PreTrainedModel,
    ProgressCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)
from transformers.trainer_callback import ExportableState

from ..averaging import WeightSnapshots, average_state_dicts, load_weights, snapshot_folders, snapshot_step
from ..cards import data_languages, training_summary, write_model_card
from ..config_io import apply_overrides, from_dict, load_yaml
from ..data import (
    DataSpec,
    LengthGroupedPairs,
    TokenBatchSampler,
    column_lengths,
    format_report,
    load_data,
    pair_lengths,
    plan_summary,
    tokenize_dataset,
    trained_tokenizer_folder,
)
from ..errors import EncdecError, OverwriteError
from ..folders import WEIGHTS_NAME, save_for_pipeline
from ..io_utils import WriterLock, atomic_write_json, publish_folder, refuse_overlap, require_file
from ..metrics import build_compute_metrics
from ..parallel import cpu_processes, process_state, unsharded_copy
from ..progress import TrainingProgress, quiet_transformers_bars
from ..stop_points import stop_point
from ..tokenization import check_tokenizer_matches_model, load_tokenizer, special_token_ids, train_tokenizer

logger = logging.getLogger(__name__)

TOKENIZER_SUBDIR = "tokenizer"
CHECKPOINT_SUBDIR = "checkpoints"
SNAPSHOT_SUBDIR = "snapshots"  # under CHECKPOINT_SUBDIR: the weight snapshots of training.average_last


@dataclass
class TokenizerSettings:
    path: str | None = None  # an existing tokenizer folder; null trains one on the training split
    vocab_size: int = 8000  # size of the joint source/target subword vocabulary
    algorithm: str = "bpe"  # "bpe" or "unigram"
    pre_tokenizer: str = "metaspace"  # "metaspace" or "whitespace_punct"
    min_frequency: int = 2  # BPE: merges seen fewer times are not learned


@dataclass
class TrainingSettings:
    output_dir: str = "runs/model"  # the model folder; checkpoints go to <output_dir>/checkpoints
    overwrite: bool = False  # replace an existing, non-empty output_dir
    seed: int = 0  # seeds Python, NumPy and torch
    num_train_epochs: float = 10.0  # used when max_steps <= 0
    max_steps: int = -1  # > 0 overrides num_train_epochs
    per_device_train_batch_size: int = 64  # sentence pairs per step and device
    per_device_eval_batch_size: int = 128  # sentence pairs per generation batch
    gradient_accumulation_steps: int = 1  # effective batch = this x per-device batch x devices
    learning_rate: float | None = None  # peak rate; null with lr_scheduler_type "vaswani" uses the paper's rate
    lr_scheduler_type: str = "vaswani"  # "vaswani" (Eq. 3) or any Trainer schedule: linear, cosine, inverse_sqrt...
    lr_factor: float = 1.0  # "vaswani" only: scales d_model^-0.5 * warmup^-0.5
    warmup_steps: int = 4000  # linear warm-up steps (paper: 4000)
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    adam_beta1: float = 0.9  # paper: 0.9
    adam_beta2: float = 0.98  # paper: 0.98
    adam_epsilon: float = 1e-9  # paper: 1e-9
    max_grad_norm: float = 1.0  # gradient clipping (0 disables)
    label_smoothing: float = 0.1  # paper: 0.1 (Section 5.4)
    max_source_length: int = 128  # tokens, including </s>
    max_target_length: int = 128  # tokens, including </s>
    overlong: str = "filter"  # pairs over the limits: "filter" drops them, "truncate" cuts them
    eval_strategy: str = "epoch"  # "epoch", "steps" or "no": when BLEU/chrF are computed
    eval_steps: int | None = None  # with eval_strategy "steps"
    eval_max_samples: int | None = None  # evaluate on the first N validation pairs (faster), null for all
    eval_num_beams: int | None = None  # beam size for validation during training; null = generation.num_beams
    save_total_limit: int = 2  # checkpoints kept (the best is always kept)
    early_stopping_patience: int | None = None  # evaluations without BLEU gain before stopping; null disables
    metric_for_best_model: str = "bleu"  # "bleu", "chrf" or "loss"
    resume_from_checkpoint: bool | str = False  # true = the latest complete checkpoint in output_dir; or a path
    logging_steps: int = 50  # log the training loss every N steps
    report_to: str = "auto"  # "auto" = tensorboard when installed, "none", or a Trainer integration name
    bf16: bool = False  # bfloat16 autocast (CPU and recent GPUs)
    dataloader_num_workers: int = 0  # worker processes for batching
    group_by_length: bool = False  # batch pairs of similar length together: less padding, faster steps
    max_tokens: int | None = None  # batches by tokens: at most this many padded tokens (longest x pairs) per batch
    average_last: int = 0  # >= 2: average the last N weight snapshots, kept over the best checkpoint if val prefers it
    average_every: int | None = None  # steps between those snapshots (the last step is always one)


@dataclass
class GenerationSettings:
    num_beams: int = 5  # beam size for evaluation and the saved generation_config.json; 1 = greedy
    max_new_tokens: int = 128  # longest generated output
    length_penalty: float = 1.0  # beam search: exponent of the length normalisation


@dataclass
class RunConfig:
    model: str  # a model config JSON (configs/models/*.json); vocabulary and special ids come from the tokenizer
    data: DataSpec = field(default_factory=DataSpec)
    tokenizer: TokenizerSettings = field(default_factory=TokenizerSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    model_overrides: dict[str, Any] = field(default_factory=dict)  # model-config keys on top of the JSON


def load_run_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Read a run YAML, apply ``--section.key value`` overrides, and check every key and type.

    The input paths the YAML names (``model``, ``tokenizer.path``, ``data.data_dir``, ``data.files``) are relative
    to the YAML file's own folder, so a config works from any folder and keeps working when copied with its files;
    ``training.output_dir`` and the paths given as overrides are relative to the current folder, as every path typed
    on a command line is."""
    data = load_yaml(path)
    anchor_input_paths(data, Path(path).resolve().parent)
    return from_dict(RunConfig, apply_overrides(data, overrides or []), where="config")


def anchor_input_paths(data: dict, base: Path) -> None:
    """Make the relative input paths of a run config's raw mapping relative to ``base`` (the YAML's folder), in
    place. A ``tokenizer.path`` that is no folder there stays as written: it may be a Hub repository id."""
    def anchored(value: Any) -> Any:
        if isinstance(value, list):
            return [anchored(item) for item in value]
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            return value
        return os.path.normpath(base / value)

    if isinstance(data.get("model"), str):
        data["model"] = anchored(data["model"])
    tokenizer, section = data.get("tokenizer"), data.get("data")
    if isinstance(tokenizer, dict) and isinstance(tokenizer.get("path"), str) \
            and (base / tokenizer["path"]).is_dir():
        tokenizer["path"] = anchored(tokenizer["path"])
    if isinstance(section, dict):
        if isinstance(section.get("data_dir"), str):
            section["data_dir"] = anchored(section["data_dir"])
        if isinstance(section.get("files"), dict):
            section["files"] = {split: anchored(files) for split, files in section["files"].items()}


def build_model_config(config: RunConfig, tokenizer) -> Any:
    """Model hyper-parameters from the JSON file, vocabulary size and special-token ids from the tokenizer."""
    path = require_file(config.model, "model config")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise EncdecError(f"{path} is not valid JSON: {error}") from None
    model_type = values.pop("model_type", None)
    if model_type is None:
        raise EncdecError(f"{path} has no `model_type`; use \"transformer_seq2seq\" or \"rnn_seq2seq\".")
    values.update(config.model_overrides)
    ids = special_token_ids(tokenizer)
    for key, value in ids.items():
        if key in values and values[key] != value:
            raise EncdecError(f"{path} sets `{key}`={values[key]} but the tokenizer has {value}; remove the key, "
                              "the model takes it from the tokenizer.")
    values.update(ids)
    try:
        return AutoConfig.for_model(model_type, **values)
    except ValueError as error:
        raise EncdecError(f"{path}: {error}") from None


def resolve_learning_rate(settings: TrainingSettings, d_model: int) -> tuple[float, str]:
    """Vaswani et al. 2017, Eq. 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5). That is Trainer's
    ``inverse_sqrt`` schedule (linear warm-up, then 1/sqrt decay) with the peak d_model^-0.5 * warmup^-0.5."""
    if settings.lr_scheduler_type != "vaswani":
        if settings.learning_rate is None:
            raise EncdecError("`training.learning_rate` is required unless `training.lr_scheduler_type` is vaswani.")
        return settings.learning_rate, settings.lr_scheduler_type
    peak = settings.lr_factor * d_model**-0.5 * max(settings.warmup_steps, 1) ** -0.5
    return (settings.learning_rate or peak), "inverse_sqrt"


# the shortest warm-up with which a deep post-LN Transformer trained in our Multi30k checks (docs/results.md)
POST_LN_SAFE_WARMUP = 4000


def post_ln_warmup_warning(model_config: Any, settings: TrainingSettings) -> str | None:
    """A warning for a post-LN Transformer of 6 or more layers with a warm-up under POST_LN_SAFE_WARMUP steps, else
    None. Post-LN (Vaswani et al. 2017) needs its warm-up (Liu et al. 2020, "Understanding the Difficulty of Training
    Transformers"): on Multi30k our 6+6 post-LN model with a 400-step warm-up stalled at 9.6 val BLEU after 6,000
    steps (pre-LN: 36.7), and trained to 38.2 with a 4,000-step warm-up."""
    if getattr(model_config, "model_type", None) != "transformer_seq2seq" or model_config.normalize_before:
        return None
    layers = max(model_config.encoder_layers, model_config.decoder_layers)
    if layers < 6 or settings.warmup_steps >= POST_LN_SAFE_WARMUP:
        return None
    return (f"a post-LN Transformer with {layers} layers and a {settings.warmup_steps}-step warm-up: deep post-LN "
            f"models stall with short warm-ups (on Multi30k a 6+6 model with 400 steps reached 9.6 val BLEU, with "
            f"4,000 steps 38.2). Set `training.warmup_steps` to {POST_LN_SAFE_WARMUP} or more, or use pre-LN "
            "(`normalize_before: true` in the model config); see docs/results.md, 'Post-LN stability'.")


class StopOnCtrlC(TrainerCallback):
    """Ctrl-C stops training at the next step (or evaluation batch, evaluation, save or log), cleanly. Python raises
    a signal's ``KeyboardInterrupt`` in whatever code runs when it comes; inside a finalizer (``__del__``, a weakref
    callback: garbage collection runs them anywhere) it is printed with a traceback and dropped, and training went on.
    So while the block runs, the first SIGINT only sets a flag, which the Trainer's next callback turns into
    ``KeyboardInterrupt``; a second SIGINT raises at once."""

    def __init__(self) -> None:
        self.interrupted = False
        self.previous: Any = None

    def __enter__(self) -> StopOnCtrlC:
        if threading.current_thread() is threading.main_thread():  # signal handlers belong to the main thread
            self.previous = signal.signal(signal.SIGINT, self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def handle(self, signum: int, frame: Any) -> None:
        if self.interrupted:  # pressed again: do not wait for the step to end
            raise KeyboardInterrupt
        self.interrupted = True

    def check(self, *args: Any, **kwargs: Any) -> None:
        if self.interrupted:
            raise KeyboardInterrupt

    on_step_begin = on_step_end = on_substep_end = on_prediction_step = on_evaluate = on_save = on_log = check


class TrainingClock(TrainerCallback, ExportableState):
    """Training wall time summed over the attempts of a run that was stopped and resumed. Trainer's ``train_runtime``
    counts the last attempt alone; this clock's count goes into every checkpoint's ``trainer_state.json`` (Trainer
    saves the state of ``ExportableState`` callbacks there), and an attempt resumed from that checkpoint starts from
    it. Time spent after the last checkpoint of a stopped attempt is not counted: the resumed run does that work again.
    ``seconds`` is None when the run resumed from a checkpoint that kept no count (an encdec version without it)."""

    def __init__(self, seconds: float | None = 0.0) -> None:
        self.seconds = seconds  # trained before this attempt began
        self.began: float | None = None
        self.first_step = 1  # this attempt's first optimiser step

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        name = type(self).__name__
        self.first_step = state.global_step + 1
        if state.global_step == 0:
            self.seconds = 0.0
        else:  # resumed: the checkpoint's count
            saved = state.stateful_callbacks.get(name)
            self.seconds = saved["args"]["seconds"] if saved else None
        self.began = time.perf_counter()
        state.stateful_callbacks[name] = self.state()  # Trainer's save looks the name up: an old checkpoint lacks it

    def total(self) -> float | None:
        """Seconds trained so far, over every attempt; None when an earlier attempt's count is unknown."""
        if self.seconds is None:
            return None
        return self.seconds + (time.perf_counter() - self.began if self.began is not None else 0.0)

    def state(self) -> dict:
        return {"args": {"seconds": self.total()}, "attributes": {}}


class CheckpointStopPoint(TrainerCallback):
    """The ``checkpoint`` stopping point (``encdec.stop_points``): reached once a checkpoint is on disk; inert unless
    a test sets ``ENCDEC_STOP_AT``."""

    def on_save(self, args, state, control, **kwargs) -> None:
        stop_point("checkpoint")


class SamplerEpoch(TrainerCallback):
    """Sets the token batch sampler's epoch at the start of each epoch. The Trainer sets it too, except in one case:
    resuming mid-epoch with several processes, where the sampler sits under two accelerate wrappers
    (``SkipBatchSampler`` around ``BatchSamplerShard``) that pass no epoch on. ``state.epoch`` then is the
    checkpoint's (e.g. 1.6: epoch 1)."""

    def __init__(self, trainer: EncdecTrainer) -> None:
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        if self.trainer.token_sampler is not None:
            self.trainer.token_sampler.set_epoch(int(state.epoch or 0))


class EncdecTrainer(Seq2SeqTrainer):
    """``Seq2SeqTrainer`` whose evaluation leaves the model's generation config as it found it, and which batches by
    tokens when ``max_tokens`` is set.

    ``Seq2SeqTrainer.prediction_step`` fills transformers' defaults into ``model.generation_config`` (``max_length``
    = 20), after which every ``generate()`` warns that ``max_new_tokens`` and ``max_length`` are both set, and the
    saved ``generation_config.json`` carries the stray 20.
    """

    def __init__(self, *args: Any, max_tokens: int | None = None, **kwargs: Any) -> None:
        self.max_tokens, self.token_sampler = max_tokens, None
        super().__init__(*args, **kwargs)
        if max_tokens is not None:
            self.add_callback(SamplerEpoch(self))

    def prediction_step(self, *args, **kwargs):
        config = self.model.generation_config
        max_length = config.max_length
        try:
            return super().prediction_step(*args, **kwargs)
        finally:
            config.max_length = max_length

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        """With ``max_tokens``, batches by tokens (``encdec.data.batching``) instead of a fixed sentence count; with
        ``group_by_length``, the Trainer's length-grouped order with the lengths read from Arrow, not example by
        example (``LengthGroupedPairs``)."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.max_tokens is None:
            if self._groups_tokenized(dataset):
                return LengthGroupedPairs(self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                          column_lengths(dataset, "input_ids"))
            return super()._get_train_sampler(train_dataset)
        source, target = pair_lengths(dataset)
        sampler = TokenBatchSampler(np.maximum(source, target), self.max_tokens, seed=self.args.seed,
                                    world_size=self.args.world_size, rank=self.args.process_index)
        self.token_sampler = sampler
        if self.is_world_process_zero():
            plan = sampler.batches(0)
            per_step = self.args.gradient_accumulation_steps * self.args.world_size  # batches an optimizer step
            logger.info("batches by tokens (max_tokens %d): %s; %d batches a step", self.max_tokens,
                        plan_summary(source, target, plan, per_step), per_step)
        return sampler

    def _groups_tokenized(self, dataset: Any) -> bool:
        """``group_by_length`` is on and ``dataset`` is a tokenized ``datasets.Dataset`` (its lengths are in Arrow)."""
        return _groups_by_length(self.args) and isinstance(dataset, Dataset) and "input_ids" in dataset.column_names

    def _get_eval_sampler(self, eval_dataset: Any) -> Any:
        """With ``group_by_length`` the Trainer orders evaluation by length too (seeded): the same order, with the
        lengths read from Arrow (``LengthGroupedPairs``)."""
        if self._groups_tokenized(eval_dataset):
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return LengthGroupedPairs(self.args.eval_batch_size, column_lengths(eval_dataset, "input_ids"),
                                      generator=torch.Generator().manual_seed(seed))  # a split may lack labels
        return super()._get_eval_sampler(eval_dataset)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """Loading the best checkpoint at the end: with tied embeddings the checkpoint stores the shared matrix once
        (safetensors keeps one copy), so ``load_state_dict`` reports its aliases (``lm_head.weight``, the decoder
        embedding) as missing, and transformers warned about it on every run. They are not missing: they are the
        loaded matrix itself. Only keys that are really absent are reported."""
        tied = set(self.model._tied_weights_keys or {}) if self.model.config.tie_word_embeddings else set()
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def evaluation_loop(self, *args, **kwargs):
        """Several processes: ``Seq2SeqTrainer.evaluate``/``predict`` gather with ``accelerator.gather`` (transformers
        PR #27025, for ``num_return_sequences`` > 1), which keeps the examples Accelerate repeats to even out the
        processes' last batches: BLEU would count some sentences twice whenever the split is not a multiple of
        processes x batch. With one sequence per example, ``gather_for_metrics`` drops the repeats."""
        returned = (getattr(self, "_gen_kwargs", None) or {}).get("num_return_sequences") \
            or getattr(self.model.generation_config, "num_return_sequences", None) or 1
        if returned == 1:
            self.gather_function = self.accelerator.gather_for_metrics
        return super().evaluation_loop(*args, **kwargs)


def latest_complete_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The newest ``checkpoint-N`` that holds ``trainer_state.json``: Trainer writes that file last, so a
    checkpoint interrupted while being written is never resumed from."""
    complete = [p for p in checkpoint_dir.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
                and p.name.split("-")[-1].isdigit()]
    return max(complete, key=lambda p: int(p.name.split("-")[-1]), default=None)


def run_inputs(config: RunConfig) -> list[str]:
    """The local files and folders a run reads: the model JSON, the tokenizer folder and the data."""
    data, paths = config.data, [config.model, config.tokenizer.path, config.data.data_dir]
    for files in (data.files or {}).values():
        paths += files if isinstance(files, list) else [files]
    return [str(path) for path in paths if isinstance(path, str) and path and Path(path).exists()]


def prepare_output_dir(settings: TrainingSettings, inputs: list[str] = ()) -> Path:
    """Under several processes every one checks (and refuses alike), then only the main one deletes and creates.
    ``overwrite`` replaces the folder, so then it may not hold one of the run's ``inputs``."""
    output_dir = Path(settings.output_dir)
    resuming = bool(settings.resume_from_checkpoint)
    clear = output_dir.is_dir() and any(output_dir.iterdir()) and not resuming
    if clear and not settings.overwrite:
        raise OverwriteError(f"The output directory {output_dir} already exists and is not empty; pass "
                             "--training.overwrite true to replace it, --training.resume_from_checkpoint true "
                             "to continue it, or choose another output_dir.")
    if clear:
        refuse_overlap(output_dir, inputs, option="training.output_dir")
    state = process_state()
    state.wait_for_everyone()  # every process has looked before the main one changes anything
    if state.is_main_process:
        if clear:
            shutil.rmtree(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
    state.wait_for_everyone()
    return output_dir


def training_texts(train_split: Any, batch_size: int = 10_000) -> Iterator[str]:
    """Every source, then every target sentence of the training split, read batch by batch from its memory-mapped
    columns (a tokenizer is trained on them without holding the corpus as a list)."""
    for column in ("source", "target"):
        for batch in train_split.select_columns([column]).iter(batch_size=batch_size):
            yield from batch[column]


def get_tokenizer(config: RunConfig, train_split: Any, output_dir: Path):
    """Load the configured tokenizer, reuse the one a resumed run saved or an earlier run trained on the same
    split with the same settings (kept in ``data.cache_dir``), or train one on the training split."""
    saved = output_dir / TOKENIZER_SUBDIR
    if config.tokenizer.path:
        return load_tokenizer(config.tokenizer.path)
    state = process_state()
    with state.main_process_first():  # several processes: the main one trains and saves it, the others load it
        if (saved / "tokenizer_config.json").is_file():  # saved whole (publish_folder), or not at all
            return load_tokenizer(saved)
        s = config.tokenizer
        settings = {"vocab_size": s.vocab_size, "algorithm": s.algorithm, "pre_tokenizer": s.pre_tokenizer,
                    "min_frequency": s.min_frequency,
                    "model_max_length": max(config.training.max_source_length, config.training.max_target_length)}
        cached = trained_tokenizer_folder(train_split, settings, config.data.cache_dir)
        if (cached / "tokenizer.json").is_file():
            logger.info("tokenizer: reused %s (trained on this training split with these settings)", cached)
            tokenizer = load_tokenizer(cached)
        else:
            tokenizer = train_tokenizer(training_texts(train_split), **settings)
            publish_folder(tokenizer.save_pretrained, cached)
        if state.num_processes > 1 and not (saved / "tokenizer_config.json").is_file():
            publish_folder(tokenizer.save_pretrained, saved)
    return tokenizer  # one process: train() saves it to <output_dir>/tokenizer once the run is set up


def check_positions(config: RunConfig, model_config) -> None:
    """Learned positions cannot extrapolate: refuse, before training, lengths the position table cannot hold."""
    if getattr(model_config, "position_embedding_type", None) != "learned":
        return
    limit, s, new_tokens = model_config.max_position_embeddings, config.training, config.generation.max_new_tokens
    lengths = {f"training.max_source_length={s.max_source_length}": s.max_source_length,
               f"training.max_target_length={s.max_target_length}": s.max_target_length,
               f"generation.max_new_tokens={new_tokens} (+1 start token)": new_tokens + 1}
    too_long = [name for name, length in lengths.items() if length > limit]
    if too_long:
        raise EncdecError(f"The model has learned positions with max_position_embeddings={limit}, too few for "
                          f"{', '.join(too_long)}: lower them to fit, or raise max_position_embeddings.")


def report_to(setting: str) -> list[str]:
    if setting == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") else []
    return [] if setting == "none" else [setting]


def _groups_by_length(args: Seq2SeqTrainingArguments) -> bool:
    """Whether the arguments ask for the Trainer's length-grouped order (either name, see ``length_grouping``)."""
    return getattr(args, "train_sampling_strategy", None) == "group_by_length" or bool(getattr(args, "group_by_length",
                                                                                               False))


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


def _validation_score(trainer: Seq2SeqTrainer, validation, metric: str, num_beams: int) -> dict[str, float]:
    metrics = trainer.evaluate(validation, metric_key_prefix="validation", num_beams=num_beams)
    scores = {k.removeprefix("validation_"): v for k, v in metrics.items()}
    if metric not in scores:
        raise EncdecError(f"The validation metrics {sorted(scores)} lack `training.metric_for_best_model`={metric}.")
    return scores


def average_or_best(trainer: Seq2SeqTrainer, validation, settings: TrainingSettings, snapshot_dir: Path,
                    num_beams: int) -> dict[str, Any]:
    """``training.average_last``: score the model Trainer ended with (the best checkpoint) and the average of the last
    snapshots on the validation split, decoding with ``num_beams`` (the run's ``generation.num_beams``: the decoding
    the model ships with, which may prefer other weights than the greedy validation during training); leave the
    better one in ``trainer.model`` and return the record for ``averaging.json``. Averaging follows Vaswani et al.
    (2017, Sec. 6.1); the choice is made on validation data only, so the test split never picks the weights."""
    process_state().wait_for_everyone()  # the main process has written the last snapshot
    metric, model = settings.metric_for_best_model, trainer.model
    snapshots = snapshot_folders(snapshot_dir)[-settings.average_last:]
    best_step = trainer.state.best_model_checkpoint or f"checkpoint-{trainer.state.global_step}"
    record: dict[str, Any] = {"average_last": settings.average_last, "average_every": settings.average_every,
                              "metric": metric, "snapshots": [str(path) for path in snapshots],
                              "steps": [snapshot_step(path) for path in snapshots],
                              "best_checkpoint_step": int(Path(best_step).name.split("-")[-1]),
                              "num_beams": num_beams}
    best = _validation_score(trainer, validation, metric, num_beams)
    if len(snapshots) < 2:
        logger.warning("training.average_last: only %d snapshot(s) in %s, so nothing was averaged; the run was "
                       "shorter than average_every=%s steps.", len(snapshots), snapshot_dir, settings.average_every)
        return {**record, "validation": {"best_checkpoint": best}, "chosen": "best_checkpoint"}
    if len(snapshots) < settings.average_last:
        logger.warning("training.average_last=%d, but the run left %d snapshots; averaging those.",
                       settings.average_last, len(snapshots))
    kept = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    load_weights(model, average_state_dicts([path / WEIGHTS_NAME for path in snapshots]), snapshots[-1])
    averaged = _validation_score(trainer, validation, metric, num_beams)
    better = averaged[metric] < best[metric] if metric == "loss" else averaged[metric] > best[metric]
    chosen = "average" if better else "best_checkpoint"
    if not better:
        load_weights(model, kept, Path(best_step))
    logger.info("validation %s: best checkpoint %.4g, average of steps %s %.4g: keeping the %s", metric, best[metric],
                record["steps"], averaged[metric], chosen.replace("_", " "))
    record.update(validation={"best_checkpoint": best, "average": averaged}, chosen=chosen)
    return record


def dataset_name(spec: DataSpec) -> str:
    """A human-readable name of the training data for the model card."""
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
                     languages=data_languages(dataclasses.asdict(config.data)))
    for item in sorted(staging.iterdir(), key=lambda item: item.name == "eval_results.json"):  # it last: the
        target = output_dir / item.name  # sign of a finished folder (encdec distill relies on it)
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(item, target)
    staging.rmdir()
    staging_root.rmdir()


def tokenize_splits(datasets: DatasetDict, tokenizer, settings: TrainingSettings, data: DataSpec | None = None
                    ) -> tuple[DatasetDict, dict]:
    """Over-long training pairs are filtered (or truncated, per ``overlong``); evaluation splits are only ever
    truncated, so BLEU is always computed on every validation and test sentence. Tokenized on ``data.num_proc``
    processes and cached in ``data.cache_dir`` (``encdec.data.tokenizing``)."""
    lengths = (settings.max_source_length, settings.max_target_length)
    data = data or DataSpec()
    where = {"num_proc": data.num_proc, "cache_dir": data.cache_dir}
    train, counts = tokenize_dataset(DatasetDict(train=datasets["train"]), tokenizer, *lengths,
                                     overlong=settings.overlong, **where)
    others = DatasetDict({name: split for name, split in datasets.items() if name != "train"})
    if others:
        evaluated, eval_counts = tokenize_dataset(others, tokenizer, *lengths, overlong="truncate", **where)
        train.update(evaluated)
        counts.update(eval_counts)
    return train, counts


def build_model(model_config, generation: GenerationSettings, tokenizer) -> PreTrainedModel:
    """A new model of ``model_config``, checked against the tokenizer, with the run's generation defaults."""
    model = AutoModelForSeq2SeqLM.from_config(model_config)
    check_tokenizer_matches_model(tokenizer, model.config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=model_config.decoder_start_token_id, bos_token_id=model_config.bos_token_id,
        eos_token_id=model_config.eos_token_id, pad_token_id=model_config.pad_token_id,
        num_beams=generation.num_beams, max_new_tokens=generation.max_new_tokens,
        length_penalty=generation.length_penalty,
    )
    return model


def checkpoint_to_resume(settings: TrainingSettings, output_dir: Path) -> str | None:
    """``resume_from_checkpoint``: true means the latest complete checkpoint of this run; when there is none yet,
    the run starts from step 0, and says so in one line."""
    resume = settings.resume_from_checkpoint
    if resume is True:
        resume = latest_complete_checkpoint(output_dir / CHECKPOINT_SUBDIR)
        if resume is None and process_state().is_main_process:
            logger.warning("training.resume_from_checkpoint is true, but %s holds no complete checkpoint yet: "
                           "starting from step 0.", output_dir / CHECKPOINT_SUBDIR)
    return str(resume) if resume else None


def resume_hint(output_dir: str | Path, command: list[str]) -> str:
    """One line for a run that was stopped (Ctrl-C): the last complete checkpoint it kept and the ``command`` (the
    run's own, as a list) that continues it, or that nothing was kept yet."""
    checkpoint = latest_complete_checkpoint(Path(output_dir) / CHECKPOINT_SUBDIR)
    resume = [*strip_options(command, ("--training.resume_from_checkpoint", "--training.overwrite")),
              "--training.resume_from_checkpoint", "true"]
    if checkpoint is None:
        return (f"stopped before the first checkpoint was saved in {output_dir}; nothing to resume. Rerun with: "
                f"{shlex.join([*resume[:-2], '--training.overwrite', 'true'])}")
    return f"stopped; the last checkpoint kept is {checkpoint}. Resume with: {shlex.join(resume)}"


def strip_options(command: list[str], names: tuple[str, ...]) -> list[str]:
    """``command`` without the ``--name value`` (or ``--name=value``) pairs of ``names``."""
    kept, skip = [], False
    for item in command:
        if skip:
            skip = False
        elif item in names:
            skip = True
        elif not item.startswith(tuple(f"{name}=" for name in names)):
            kept.append(item)
    return kept


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
                                               config.generation.num_beams)
        chosen = results["averaging"]
        results["train"]["final_weights"] = (f"average of the steps {', '.join(map(str, chosen['steps']))}"
                                             if chosen["chosen"] == "average" else
                                             f"checkpoint of step {chosen['best_checkpoint_step']}")
    for split in ("validation", "test"):
        if split in tokenized and split not in results:
            metrics = trainer.evaluate(tokenized[split], metric_key_prefix=split)
            results[split] = {k.removeprefix(f"{split}_"): v for k, v in metrics.items()}
    return results


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
    with lock if process_state().is_main_process else contextlib.nullcontext():
        return train_holding_the_lock(config)


def train_holding_the_lock(config: RunConfig) -> dict:
    """``train``, once its output folder is this run's."""
    set_seed(config.training.seed)
    if not process_state().is_main_process:  # several processes: one copy of the progress bars, the main one's
        disable_progress_bars()
    check_token_batching(config.training)  # before anything is written
    output_dir = prepare_output_dir(config.training, run_inputs(config))
    with process_state().main_process_first():  # several processes: the main one fills the datasets cache
        datasets = load_data(config.data)
    tokenizer = get_tokenizer(config, datasets["train"], output_dir)
    model_config = build_model_config(config, tokenizer)
    check_positions(config, model_config)
    if (warning := post_ln_warmup_warning(model_config, config.training)) and process_state().is_main_process:
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
            and trainer.is_world_process_zero():
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
        if trainer.is_world_process_zero():
            save_final_folder(trainer, tokenizer, output_dir, results, config, state_dict=full_state)
    return results


__all__ = ["GenerationSettings", "RunConfig", "TokenizerSettings", "TrainingSettings", "load_run_config",
           "resume_hint", "train"]
