"""How far a chunked job is (``encdec.chunked``), on stderr: lines done, lines/s and the time left."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

PROGRESS_EVERY_SECONDS = 5.0  # stderr that is not a terminal: one progress line this often


class Progress:
    """Lines done on stderr: a tqdm bar on a terminal, else a line every ``PROGRESS_EVERY_SECONDS``; silent when
    ``quiet``."""

    def __init__(self, what: str, total: int | None, initial: int = 0, quiet: bool = False) -> None:
        self.what, self.total, self.done, self.quiet = what, total, initial, quiet
        self.began, self.started_at, self.last_line = time.monotonic(), initial, 0.0
        self.bar = None
        if not quiet and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, desc=what, unit=" lines", unit_scale=True,
                            dynamic_ncols=True, file=sys.stderr)

    def update(self, lines: int) -> None:
        self.done += lines
        if self.bar is not None:
            self.bar.update(lines)
        elif not self.quiet and time.monotonic() - self.last_line >= PROGRESS_EVERY_SECONDS:
            self.last_line = time.monotonic()
            print(f"{self.what}: {self.describe()}", file=sys.stderr, flush=True)

    def describe(self) -> str:
        seconds = max(time.monotonic() - self.began, 1e-9)
        rate = (self.done - self.started_at) / seconds
        done = f"{self.done:,}/{self.total:,} lines" if self.total is not None else f"{self.done:,} lines"
        left = ""
        if self.total is not None and rate > 0:
            left = f", {(self.total - self.done) / rate:.0f} s left"
        return f"{done}, {rate:,.1f} lines/s{left}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif not self.quiet and self.done:
            print(f"{self.what}: done, {self.describe()}", file=sys.stderr, flush=True)


__all__ = ["PROGRESS_EVERY_SECONDS", "Progress"]
