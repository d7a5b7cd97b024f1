"""``encdec train``: a run config (YAML) -> tokenizer, datasets, model -> ``Seq2SeqTrainer`` -> a model folder.

No model code lives here. The run config has five sections, each a dataclass (``config``); every key is documented
in ``configs/*.yaml``. One module per concern:

- ``config``: the run config's schema and loading; ``model``: the new model and the checks made before training;
- ``arguments``: ``Seq2SeqTrainingArguments`` from the run config; ``trainer``: ``EncdecTrainer``;
- ``callbacks``: Ctrl-C, the training clock, the checkpoint stopping point;
- ``run_folder``: the output folder, the checkpoint to resume and the resume hint;
- ``results``: the final weights (best checkpoint or average) and their scores; ``publish``: the model folder;
- ``run``: ``train``, which puts them together, with the run's tokenizer (reused when it can be, else trained with
  ``encdec.tokenization``) and its tokenized splits.

Every name importable from ``encdec.training`` before it became a package still is, from here.
"""

from ..tokenization import special_token_ids
from .arguments import check_token_batching, length_grouping, report_to, resolve_learning_rate, training_arguments
from .callbacks import CheckpointStopPoint, StopOnCtrlC, TrainingClock
from .config import (
    GenerationSettings,
    RunConfig,
    TokenizerSettings,
    TrainingSettings,
    anchor_input_paths,
    load_run_config,
)
from .model import POST_LN_SAFE_WARMUP, build_model, build_model_config, check_positions, post_ln_warmup_warning
from .publish import dataset_name, save_final_folder
from .results import average_or_best, check_averaging, final_results
from .run import build_trainer, get_tokenizer, tokenize_splits, train, train_holding_the_lock, training_texts
from .run_folder import (
    CHECKPOINT_SUBDIR,
    SNAPSHOT_SUBDIR,
    TOKENIZER_SUBDIR,
    checkpoint_to_resume,
    latest_complete_checkpoint,
    prepare_output_dir,
    resume_hint,
    run_inputs,
    strip_options,
)
from .trainer import EncdecTrainer, SamplerEpoch

__all__ = [
    "CHECKPOINT_SUBDIR",
    "POST_LN_SAFE_WARMUP",
    "SNAPSHOT_SUBDIR",
    "TOKENIZER_SUBDIR",
    "CheckpointStopPoint",
    "EncdecTrainer",
    "GenerationSettings",
    "RunConfig",
    "SamplerEpoch",
    "StopOnCtrlC",
    "TokenizerSettings",
    "TrainingClock",
    "TrainingSettings",
    "anchor_input_paths",
    "average_or_best",
    "build_model",
    "build_model_config",
    "build_trainer",
    "check_averaging",
    "check_positions",
    "check_token_batching",
    "checkpoint_to_resume",
    "dataset_name",
    "final_results",
    "get_tokenizer",
    "latest_complete_checkpoint",
    "length_grouping",
    "load_run_config",
    "post_ln_warmup_warning",
    "prepare_output_dir",
    "report_to",
    "resolve_learning_rate",
    "resume_hint",
    "run_inputs",
    "save_final_folder",
    "special_token_ids",
    "strip_options",
    "tokenize_splits",
    "train",
    "train_holding_the_lock",
    "training_arguments",
    "training_texts",
]
