"""When int8 is the slower choice: the sizes below which int8 measured slower than float32, per engine and model
family, and the one-line note the commands print when int8 is asked for a model that small."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

# When int8 is the slower choice, measured by scripts/benchmark_int8.py (the table, the command and the machine are
# in docs/fast-inference.md#when-int8-pays): per (engine, model_type), the config key that sizes the model, the
# smallest measured size from which int8 was faster than float32 in every measurement (1 and 2 threads, greedy and
# beam 5), and the largest int8 / float32 time measured below that size. A family int8 paid for at every measured
# size is absent. Re-run the script and update this table when the engines, their versions or the CPU change.
INT8_MEASURED: dict[tuple[str, str], tuple[str, int, float]] = {
    ("torch", "transformer_seq2seq"): ("d_model", 192, 1.23),
    ("torch", "rnn_seq2seq"): ("hidden_size", 512, 3.78),
    ("ctranslate2", "transformer_seq2seq"): ("d_model", 192, 1.22),
}
INT8_DOC = "docs/fast-inference.md#when-int8-pays"
_int8_notes_said: set[str] = set()  # the notes this process has printed


def int8_note(engine: str, config: Mapping[str, Any] | Any) -> str | None:
    """The one-line note for int8 asked of ``engine`` (``"torch"`` or ``"ctranslate2"``, on a CPU) for a model of
    ``config`` (a model config, or its dict): int8 measured slower than float32 for models this small, by how much,
    and where the measurements are; None where int8 measured faster at that size or the family was not measured."""
    def value(key: str) -> Any:
        return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)

    measured = INT8_MEASURED.get((engine, value("model_type")))
    if measured is None:
        return None
    key, pays_from, slowdown = measured
    size = value(key)
    if not isinstance(size, int) or size >= pays_from:
        return None
    return (f"note: int8 measured slower than float32 for models this small ({key} {size} < {pays_from}) on "
            f"{engine}: up to {slowdown:.1f}x the float32 time; see {INT8_DOC}")


def note_if_int8_is_slower(engine: str, config: Mapping[str, Any] | Any) -> None:
    """Print ``int8_note`` to stderr where there is one, once per process (an evaluation of many checkpoints, or a
    server of several models of one size, says it once)."""
    note = int8_note(engine, config)
    if note is not None and note not in _int8_notes_said:
        _int8_notes_said.add(note)
        print(note, file=sys.stderr, flush=True)


__all__ = ["INT8_DOC", "INT8_MEASURED", "int8_note", "note_if_int8_is_slower"]
