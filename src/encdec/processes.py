"""Which process is this? One answer for the package.

Under a launcher (``torchrun``, ``accelerate launch``: they set ``WORLD_SIZE``) several processes run the same
command, and only the main one writes shared files, saves the model folder and prints summaries.
``is_main_process()`` says whether this is that one: without a launcher it is, and no process group is joined; under
one, Accelerate's state answers (rank 0), the same state the Trainer's ``is_world_process_zero()`` reads.
``rank_and_world()`` is this process's (rank, number of processes) from the same source, for work shared out by rank
(``encdec.inference.corpus.Shard``). ``process_state()`` is that state, for what only it knows: the device and the
barriers (``wait_for_everyone``, ``main_process_first``). ``launched()`` is what the launcher told this process
(``RANK``, ``WORLD_SIZE``), read without joining anything: what the command line says before a command starts
(Accelerate's state, once joined, holds the same numbers).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from accelerate import PartialState


def launched(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(rank, number of processes) as the launcher (``torchrun``, ``accelerate launch``) set them for this process in
    ``environ`` (the environment): ``RANK`` and ``WORLD_SIZE``, (0, 1) without a launcher. No process group is
    joined to answer."""
    environ = os.environ if environ is None else environ
    return int(environ.get("RANK") or 0), int(environ.get("WORLD_SIZE") or 1)


def _has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6: CUDA, XPU, MPS, ...
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def cpu_processes() -> bool:
    """Whether Accelerate must be told to join the processes on the CPU (gloo): under a launcher (``WORLD_SIZE`` >
    1) on a machine without a GPU, or with ``ACCELERATE_USE_CPU=true``. Without it Accelerate sees no device to
    join the processes on, and each one would train alone on the whole data."""
    if os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        return True
    return launched()[1] > 1 and not _has_accelerator()


def process_state() -> PartialState:
    """Accelerate's view of the processes (rank, main process, barriers); creating it joins the process group."""
    return PartialState(cpu=cpu_processes())


def is_main_process() -> bool:
    """Whether this process writes, saves and prints for the run: the only process, or rank 0 of a launch."""
    return launched()[1] <= 1 or process_state().is_main_process


def rank_and_world() -> tuple[int, int]:
    """(rank, number of processes) of this process: (0, 1) without a launcher, with no process group joined; under
    one, Accelerate's state's (joining the process group), whose rank 0 is ``is_main_process()``."""
    if launched()[1] <= 1:
        return 0, 1
    state = process_state()
    return state.process_index, state.num_processes


__all__ = ["cpu_processes", "is_main_process", "launched", "process_state", "rank_and_world"]
