"""The run config (YAML): five sections, each a dataclass; every key is documented in ``configs/*.yaml``."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config_io import apply_overrides, from_dict, load_yaml
from ..data import DataSpec
from ..decoding_options import SAVED, declared


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
    eval_max_samples: int | None = None  # the first N validation pairs (of each direction, multilingual); null: all
    eval_num_beams: int | None = None  # beam size for validation during training; null = the generation section's
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


# The ``generation`` section: the decoding options a trained model saves as its defaults (its
# generation_config.json, which every front end resolves against), with evaluation's beam size. Derived from their
# declaration (``decoding_options``: the options of its ``SAVED`` front, each with the run config's default and help).
GenerationSettings = dataclasses.make_dataclass("GenerationSettings", [
    (item.name, item.metadata["kind"], field(default=item.metadata["saved"][0],
                                             metadata={"help": item.metadata["saved"][1]}))
    for item in declared(SAVED)])
GenerationSettings.__module__ = __name__


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

    The input paths the YAML names (``model``, ``tokenizer.path``, ``data.data_dir``, ``data.files``,
    ``data.pair_dirs``) are relative
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
        if isinstance(section.get("pair_dirs"), dict):
            section["pair_dirs"] = {name: anchored(folder) for name, folder in section["pair_dirs"].items()}
