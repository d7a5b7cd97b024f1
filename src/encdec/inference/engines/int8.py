"""When int8 is the slower choice: the sizes below which int8 measured slower than float32, per engine, model
family and CPU class, and the one-line note the commands print when int8 is asked for a model that small."""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from ...backends import BACKENDS

# The CPU classes int8 behaves differently on: x86's int8 kernels add products in int32 with VNNI (AVX-512 VNNI
# or AVX-VNNI), in saturating int16 pairs without it (AVX2, or AVX-512 before Cascade Lake); ARM has its own.
CPU_CLASSES = {"x86-vnni": "x86-64 with VNNI", "x86-avx2": "x86-64 without VNNI (AVX2)", "arm64": "ARM64",
               "other": "another CPU"}
# When int8 is the slower choice, per (engine, model_type, CPU class): each backend's ``int8_measured``
# (encdec.backends), measured by scripts/benchmark_int8.py (the tables, the commands and the machines are in
# docs/fast-inference.md#when-int8-pays): the config key that sizes the model, the smallest measured size from which
# int8 was faster than float32 in every measurement (1 and 2 threads, greedy and beam 5), and the largest int8 /
# float32 time measured below that size. A family int8 paid for at every measured size is absent. Re-run the script
# and update the backend's declaration when the engines, their versions or the CPU change.
INT8_MEASURED: dict[tuple[str, str, str], tuple[str, int, float]] = {
    (name, family, cpu): rule for name, backend in BACKENDS.items() for (family, cpu), rule in backend.int8_measured}
INT8_DOC = "docs/fast-inference.md#when-int8-pays"
# Where an engine's int8 adds its products in saturating 16-bit pairs (x86 without VNNI): each backend's
# ``int8_saturates``, the CPU classes and the largest logit difference from its float32 measured there, as a share of
# the logits' range (scripts/int8_without_vnni.py engines, under QEMU's AVX2-only Haswell). An engine whose int8
# quantizes activations or weights to 7 bits declares none: it does not saturate.
INT8_SATURATES: dict[str, tuple[tuple[str, ...], float]] = {
    name: backend.int8_saturates for name, backend in BACKENDS.items() if backend.int8_saturates}
SATURATION_DOC = "docs/fast-inference.md#int8-on-every-cpu"
_int8_notes_said: set[str] = set()  # the notes this process has printed


@cache
def cpu_class() -> str:
    """This machine's key of ``CPU_CLASSES`` (``classify_cpu`` of its machine name and /proc/cpuinfo)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    return classify_cpu(platform.machine(), cpuinfo)


def classify_cpu(machine: str, cpuinfo: str) -> str:
    """The key of ``CPU_CLASSES`` for a CPU: ARM64 by its machine name, x86-64 by the flags Linux lists."""
    machine = machine.lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    flags = set(next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "").split())
    if machine not in ("x86_64", "amd64"):
        return "other"
    return "x86-vnni" if {"avx512_vnni", "avx_vnni"} & flags else "x86-avx2" if "avx2" in flags else "other"


def int8_note(engine: str, config: Mapping[str, Any] | Any, cpu: str | None = None) -> str | None:
    """The one-line note for int8 asked of ``engine`` (a backend's name, on a CPU) for a model of
    ``config`` (a model config, or its dict) on a CPU of class ``cpu`` (default: this one's): int8 measured slower
    than float32 for models this small, by how much, on which CPU class, and where the measurements are; the
    measurement of another class where this one's was not measured; None where int8 measured faster at that size or
    the family was not measured."""
    def value(key: str) -> Any:
        return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)

    cpu = cpu or cpu_class()
    rules = {measured_on: rule for (name, family, measured_on), rule in INT8_MEASURED.items()
             if (name, family) == (engine, value("model_type"))}
    if not rules:
        return None
    measured_on = cpu if cpu in rules else next(iter(rules))
    key, pays_from, slowdown = rules[measured_on]
    size = value(key)
    if not isinstance(size, int) or size >= pays_from:
        return None
    return (f"note: int8 measured slower than float32 for models this small ({key} {size} < {pays_from}) on "
            f"{engine}, on {CPU_CLASSES[measured_on]}: up to {slowdown:.1f}x the float32 time; see {INT8_DOC}")


def saturation_note(engine: str, cpu: str | None = None) -> str | None:
    """The one-line note for int8 asked of ``engine`` on a CPU of class ``cpu`` (default: this one's) where its int8
    products can saturate (``INT8_SATURATES``), else None."""
    cpu = cpu or cpu_class()
    classes, measured = INT8_SATURATES.get(engine, ((), 0.0))
    if cpu not in classes:
        return None
    return (f"note: {engine}'s int8 adds its products in saturating 16-bit pairs on {CPU_CLASSES[cpu]} (its logits "
            f"measured up to {measured:g} x their range away from float32's): it computes in float32 here, which is "
            f"exact; see {SATURATION_DOC}")


def note_if_int8_is_slower(engine: str, config: Mapping[str, Any] | Any) -> None:
    """Print ``int8_note``, and ``saturation_note``, to stderr where there is one, once per process (an evaluation
    of many checkpoints, or a server of several models of one size, says it once)."""
    for note in (int8_note(engine, config), saturation_note(engine)):
        note_once(note)


def note_once(note: str | None) -> None:
    """Print ``note`` (unless None) to stderr, the first time this process is given it."""
    if note is not None and note not in _int8_notes_said:
        _int8_notes_said.add(note)
        print(note, file=sys.stderr, flush=True)


__all__ = ["CPU_CLASSES", "classify_cpu", "INT8_DOC", "INT8_MEASURED", "INT8_SATURATES", "cpu_class", "int8_note",
           "note_if_int8_is_slower", "note_once", "saturation_note"]
