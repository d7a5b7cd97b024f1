"""Which process is this, and what is its share of the work? One answer for the package.

Under a launcher (``torchrun``, ``accelerate launch``: they set ``WORLD_SIZE``) several processes run the same
command, and only the main one writes shared files, saves the model folder and prints summaries.
``is_main_process()`` says whether this is that one: without a launcher it is, and no process group is joined; under
one, Accelerate's state answers (rank 0), the same state the Trainer's ``is_world_process_zero()`` reads.
``rank_and_world()`` is this process's (rank, number of processes) from the same source, for work shared out by rank.
``process_state()`` is that state, for what only it knows: the device and the barriers (``wait_for_everyone``,
``main_process_first``). ``launched()`` is what the launcher told this process (``RANK``, ``WORLD_SIZE``), read
without joining anything: what the command line says before a command starts (Accelerate's state, once joined, holds
the same numbers).

Work shared out by rank (``encdec.chunked``'s jobs: ``encdec translate``, ``align``, ``evaluate``) takes its share
here: ``Shard`` is this process's place (its rank and device; ``gather`` and ``broadcast`` pass one round's results
between the processes), and ``on_main`` does a step on the main process alone (opening the output), its refusal
raised on every process alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from accelerate import PartialState

from .errors import EncdecError


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


class Shard:
    """This process's place among the processes of a launch (``accelerate launch``, ``torchrun``): its rank, how many
    there are (``rank_and_world``), its device; ``mine`` is its item of a round, ``gather`` hands every process every
    process's result for one round of chunks."""

    def __init__(self) -> None:
        self.rank, self.world = rank_and_world()  # rank 0 is the main process
        self.device = str(process_state().device) if self.world > 1 else "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def mine(self, round_: Sequence[Any]) -> Any:
        """This process's item of one round of ``world`` items, round-robin: process p takes item p (None when the
        round, the last one, has fewer items than there are processes)."""
        return round_[self.rank] if self.rank < len(round_) else None

    def gather(self, result: Any) -> list[Any]:
        if self.world == 1:
            return [result]
        import torch.distributed as dist

        results: list[Any] = [None] * self.world
        dist.all_gather_object(results, result)
        return results

    def broadcast(self, value: Any) -> Any:
        """The main process's ``value``, on every process."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]


def on_main(shard: Shard, make: Callable[[], Any]) -> Any:
    """``make()`` on the main process only (opening the output), its refusal raised on every process alike."""
    made, message = None, None
    if shard.is_main:
        try:
            made = make()
        except EncdecError as error:
            message = str(error)
            if shard.world == 1:
                raise
    message = shard.broadcast(message)
    if message is not None:
        raise EncdecError(message)
    return made


__all__ = ["Shard", "cpu_processes", "is_main_process", "launched", "on_main", "process_state", "rank_and_world"]
