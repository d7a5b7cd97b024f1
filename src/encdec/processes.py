"""Which process is this? One answer for the package.

Under a launcher (``torchrun``, ``accelerate launch``: they set ``WORLD_SIZE``) several processes run the same
command, and only the main one writes shared files, saves the model folder and prints summaries.
``is_main_process()`` says whether this is that one: without a launcher it is, and no process group is joined; under
one, Accelerate's state answers (rank 0), the same state the Trainer's ``is_world_process_zero()`` reads.
``process_state()`` is that state, for what only it knows: the rank, the device, the barriers
(``wait_for_everyone``, ``main_process_first``).
"""

from __future__ import annotations

import os

import torch
from accelerate import PartialState


def _launched_processes() -> int:
    """How many processes the launcher started: ``WORLD_SIZE``, 1 without a launcher."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6: CUDA, XPU, MPS, ...
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def cpu_processes() -> bool:
    """Whether Accelerate must be told to join the processes on the CPU (gloo): under a launcher (``WORLD_SIZE`` >
    1) on a machine without a GPU, or with ``ACCELERATE_USE_CPU=true``. Without it Accelerate sees no device to
    join the processes on, and each one would train alone on the whole data."""
    if os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        return True
    return _launched_processes() > 1 and not _has_accelerator()


def process_state() -> PartialState:
    """Accelerate's view of the processes (rank, main process, barriers); creating it joins the process group."""
    return PartialState(cpu=cpu_processes())


def is_main_process() -> bool:
    """Whether this process writes, saves and prints for the run: the only process, or rank 0 of a launch."""
    return _launched_processes() <= 1 or process_state().is_main_process


__all__ = ["cpu_processes", "is_main_process", "process_state"]
