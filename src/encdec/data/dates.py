"""The built-in task: human-readable dates in many formats -> ISO 8601 (``3rd of March 2021`` -> ``2021-03-03``).

It needs no files, is deterministic by seed, and has a non-monotonic alignment: the day often comes first in the
source but last in the target, and month names must be mapped to numbers. ``encdec.data.load_builtin_dates`` wraps
it as a ``DatasetDict``.
"""

from __future__ import annotations

import datetime as dt
import random

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


# Each format turns a date into one human-readable string; the target is always `date.isoformat()`.
DATE_FORMATS = [
    lambda d: f"{_ordinal(d.day)} of {MONTHS[d.month - 1]} {d.year}",  # 3rd of March 2021
    lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year % 100:02d}",  # Mar 3, 21
    lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # 03.03.2021
    lambda d: f"{d.month}/{d.day}/{d.year}",  # 3/3/2021 (US)
    lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",  # March 3, 2021
    lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",  # 3 March 2021
    lambda d: f"{WEEKDAYS[d.weekday()]}, {d.day} {MONTHS[d.month - 1][:3]} {d.year}",  # Wednesday, 3 Mar 2021
    lambda d: f"{d.day} {MONTHS[d.month - 1].lower()} {d.year}",  # 3 march 2021
    lambda d: f"{MONTHS[d.month - 1][:3].upper()} {_ordinal(d.day)} {d.year}",  # MAR 3rd 2021
    lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}",  # 2021/03/03
    lambda d: f"{d.day}-{MONTHS[d.month - 1][:3]}-{d.year % 100:02d}",  # 3-Mar-21
]

_FIRST = dt.date(1950, 1, 1).toordinal()
_LAST = dt.date(2049, 12, 31).toordinal()
DATE_RANGE = (_FIRST, _LAST)  # the ordinals of the first and last date drawn


def make_date_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Return ``n`` (human-readable date, ISO date) pairs, deterministic in ``seed``.

    Two-digit years are read as 1950-2049, matching the sampled range, so every source is unambiguous.
    """
    if n < 0:
        raise ValueError(f"`n` must be >= 0, got {n}.")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        date = dt.date.fromordinal(rng.randint(_FIRST, _LAST))
        pairs.append((rng.choice(DATE_FORMATS)(date), date.isoformat()))
    return pairs


def make_date_splits(train: int, validation: int, test: int, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """Disjoint train/validation/test splits: held-out sources never appear in training."""
    pool = make_date_pairs(4 * (train + validation + test), seed)
    seen: set[str] = set()
    unique = [p for p in pool if not (p[0] in seen or seen.add(p[0]))]
    needed = train + validation + test
    if len(unique) < needed:
        raise ValueError(f"Could not draw {needed} distinct dates; ask for fewer examples.")
    return {
        "train": unique[:train],
        "validation": unique[train:train + validation],
        "test": unique[train + validation:needed],
    }


__all__ = ["DATE_FORMATS", "DATE_RANGE", "MONTHS", "WEEKDAYS", "make_date_pairs", "make_date_splits"]
