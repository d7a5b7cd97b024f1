"""Running a parsed ``encdec`` command: ``main`` parses, ``run`` prepares the process (its launcher, its threads),
calls the command and turns a user error into one line and exit status 2."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Callable

from .commands import usage_error
from .parser import build_parser, positive_int, refuse_unknown


def configure_threads(args: argparse.Namespace) -> None:
    """The commands that compute choose their thread count (``encdec.threads``) before they start, and say it when
    it is below the core count. ``encdec train``'s ``--threads`` may also come after the config."""
    if args.command in ("train", "distill"):
        args.threads, args.overrides = pop_option(args.overrides, "--threads", args.threads)
    if not hasattr(args, "threads"):
        return
    from encdec.processes import launched
    from encdec.threads import apply_threads, choose_threads

    choice = choose_threads(args.threads)
    apply_threads(choice)
    if choice.reduced and launched()[0] == 0:  # said once, before any process group is joined
        print(f"encdec {args.command}: {choice.describe()}", file=sys.stderr)


def pop_option(items: list[str], name: str, value: int | None) -> tuple[int | None, list[str]]:
    """``name N`` (or ``name=N``) taken out of ``items``, as a positive int; ``value`` when absent."""
    kept, items = [], list(items)
    while items:
        item = items.pop(0)
        if item == name or item.startswith(f"{name}="):
            text = item.split("=", 1)[1] if "=" in item else items.pop(0) if items else ""
            try:
                value = positive_int(text)
            except argparse.ArgumentTypeError as error:
                raise usage_error(f"{name}: {error}; give a whole number of threads, at least 1.") from None
        else:
            kept.append(item)
    return value, kept


LAUNCHER_VARIABLES = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")  # set by torchrun (and accelerate launch) in each worker
PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_launcher() -> None:
    """Under ``torchrun`` or ``accelerate launch``, end this worker when its launcher ends. The launchers start each
    worker in a process group of its own, so a ``kill -9`` of the launcher reaches no worker: they went on writing,
    and a ``--resume`` started meanwhile met them. Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) has the
    kernel send SIGKILL to the worker the moment its parent (the launcher) is gone; what the worker had finished is
    on disk, as after any ``kill -9``. A worker whose launcher is already gone ends at once. Elsewhere (macOS) this
    does nothing. Written here, with ctypes, because no maintained package offers it (python-prctl is unmaintained
    and needs a compiler)."""
    if not any(name in os.environ for name in LAUNCHER_VARIABLES) or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    launcher = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != launcher or launcher == 1:  # the launcher died before the signal was set
        os.kill(os.getpid(), signal.SIGKILL)


SHARING = {  # how a command shares its work between the processes of a launch
    "translate": "process p translates chunks p, p + N, ... and the main one writes them in order",
    "align": "process p aligns chunks p, p + N, ... and the main one writes them in order",
    "evaluate": "process p translates chunks p, p + N, ... and the main one scores them",
    "train": "each process trains on its share of every batch (data parallel) and the main one saves",
    "distill": "the teacher translates chunks p, p + N, ... on process p; the student trains data parallel",
}
CPU_LAUNCH = ("`accelerate launch --config_file configs/accelerate/cpu-2proc.yaml` (edit num_processes) or "
              "`torchrun --nproc_per_node N` start N")


def describe_processes(command: str, environ: dict[str, str] | None = None) -> str | None:
    """The line a command under a launcher prints at start (on the main process): how many processes and how the
    work is shared. ``accelerate launch --num_processes N`` without GPUs runs its plain launcher, which starts one
    process: that is said too, with the ways that start N. None outside a launcher, and on the other processes."""
    from encdec.processes import launched

    environ = os.environ if environ is None else environ
    rank, world = launched(environ)
    if command not in SHARING or rank != 0:
        return None
    if world > 1:
        local = int(environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
        where = "" if local == world else f", {local} on this machine"
        return f"encdec {command}: {world} processes{where}: {SHARING[command]}"
    if "ACCELERATE_MIXED_PRECISION" in environ:  # set by every accelerate launcher: this is its one process
        return (f"encdec {command}: 1 process: accelerate launch started one (on a machine without GPUs, "
                f"`--num_processes N` alone starts one); {CPU_LAUNCH}")
    return None


def leave_process_group() -> None:
    """A process of a launch leaves its process group at exit (registered once a command succeeded): gloo threads
    still running when the interpreter finalises abort the process ("terminate called without an active exception",
    pytorch/pytorch#190489). Not after a failure, when the other processes may never join the teardown
    (pytorch/torchtitan#1342). At exit, not after the command: a process that runs several commands (a test worker)
    keeps its group meanwhile; a second registration finds the group already left."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()


def run(func: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    from encdec.errors import EncdecError, OptionError

    die_with_launcher()
    if line := describe_processes(args.command):
        print(line, file=sys.stderr, flush=True)
    try:
        configure_threads(args)
        func(args)
        atexit.register(leave_process_group)
    except (EncdecError, FileNotFoundError, ValueError, OSError) as error:
        if os.environ.get("ENCDEC_DEBUG"):
            raise
        message = " ".join((error.as_flags() if isinstance(error, OptionError) else str(error)).split())  # one line
        print(f"encdec {args.command}: error: {message}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        refuse_unknown(args.parser, unknown)
    return run(args.func, args)
