"""The run's own Trainer callbacks: Ctrl-C stops cleanly, a training clock kept across resumed attempts, and the
``checkpoint`` stopping point of the tests."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..stop_points import stop_point


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
