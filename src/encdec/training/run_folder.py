"""A run's output folder: its layout, preparing it (refusing to overwrite), the checkpoint a run resumes from, and
the one-line hint that continues a stopped run."""

from __future__ import annotations

import logging
import shlex
import shutil
from pathlib import Path

from ..io_utils import refuse_existing, refuse_overlap
from ..processes import is_main_process, process_state
from .config import RunConfig, TrainingSettings

logger = logging.getLogger(__name__)


TOKENIZER_SUBDIR = "tokenizer"
CHECKPOINT_SUBDIR = "checkpoints"
SNAPSHOT_SUBDIR = "snapshots"  # under CHECKPOINT_SUBDIR: the weight snapshots of training.average_last


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
    if not resuming:
        refuse_existing(output_dir, settings.overwrite, "output directory", "training.output_dir", folder=True,
                        consent="--training.overwrite true", resume="--training.resume_from_checkpoint true")
    if clear:
        refuse_overlap(output_dir, inputs, option="training.output_dir")
    state = process_state()
    state.wait_for_everyone()  # every process has looked before the main one changes anything
    if is_main_process():
        if clear:
            shutil.rmtree(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
    state.wait_for_everyone()
    return output_dir


def checkpoint_to_resume(settings: TrainingSettings, output_dir: Path) -> str | None:
    """``resume_from_checkpoint``: true means the latest complete checkpoint of this run; when there is none yet,
    the run starts from step 0, and says so in one line."""
    resume = settings.resume_from_checkpoint
    if resume is True:
        resume = latest_complete_checkpoint(output_dir / CHECKPOINT_SUBDIR)
        if resume is None and is_main_process():
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
