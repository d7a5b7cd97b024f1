"""Inference engines: what turns a batch of source ids into output ids. ``inference.translate`` does the rest
(tokenising, batching longest first, decoding), the same for every engine.

Each engine belongs to a backend declared in ``encdec.backends`` (``Backend``): its name, its class, what it supports
(alignments, ensembles, quantize modes, dtypes, model families, its install hint) and, for an engine that reads a
folder of its own, its export format, exporter and the file that marks its folders. The command line's and the
server's choices, folder detection and every capability question read it; a backend can come from another package
(entry-point group ``encdec.backends``).

- ``interface.py``: ``Engine``, the interface every engine implements (``load``, ``generate``, ``teacher_forced``,
  ``precision``, ``config``, ``generation_config``; ``spec``, its backend).
- ``torch_engine.py``: ``TorchEngine``, the model's ``generate()``, in float32, in bfloat16 (``dtype="bfloat16"``) or
  with the linear and LSTM/GRU layers in dynamic int8 (``quantize="int8"``).
- ``ctranslate2_engine.py``: ``CTranslate2Engine``, a folder written by its exporter
  (``encdec.ship.ctranslate2_export``), decoded by CTranslate2 (an optional extra, ``encdec[ct2]``), with its weights
  computed in float32, int8 or bfloat16.
- ``onnxruntime_engine.py``: ``OnnxRuntimeEngine``, a folder written by its exporter (``encdec.ship.onnx_export``),
  either family, searched by transformers' ``generate()`` over ONNX Runtime sessions (an optional extra,
  ``encdec[onnx]``), with float32 or int8 weights; ``onnx_layout.py``: that folder's layout and manifest, which the
  export writes and the engine (and the browser runtime) reads.
- ``int8.py``: the sizes below which int8 measured slower than float32, and the note that says so.

Each engine maps the decoding options it has (beam size, length penalty, max new tokens, number of returned
sequences, sampling) and refuses the others in one line that names the option. ``load_engine``
(``encdec.inference``) builds the engine a name asks for from its backend, importing its module then: an engine's
optional dependency is imported only when that engine is used. A backend's own names (its engine class, its errors,
its record) are imported from its modules, not from this package, which names no backend but the default.
"""

from __future__ import annotations

from typing import Any

from ...backends import (
    BACKENDS,
    DEFAULT_ENGINE,
    Backend,
    engine_help,
    engines,
    engines_that,
    option_choices,
    register,
)
from .int8 import CPU_CLASSES, INT8_DOC, INT8_MEASURED, cpu_class, int8_note, note_if_int8_is_slower
from .interface import Engine, check_precision, engine_spec
from .torch_engine import TorchEngine, alignment_matrix, quantize_int8

# the choices of the engines encdec.backends declares, under their names of before the registry (option_choices()
# also counts an engine registered after this import)
ENGINES = option_choices()["engine"]
QUANTIZE_CHOICES = option_choices()["quantize"]
DTYPE_CHOICES = option_choices()["dtype"]


def as_engine(model: Any) -> Engine:
    """An engine as it is, a model (or an ensemble) as a ``TorchEngine``."""
    return model if isinstance(model, Engine) else TorchEngine(model)


__all__ = ["BACKENDS", "CPU_CLASSES", "DEFAULT_ENGINE", "DTYPE_CHOICES", "ENGINES", "INT8_DOC", "INT8_MEASURED",
           "QUANTIZE_CHOICES", "Backend", "Engine", "TorchEngine", "alignment_matrix", "as_engine", "check_precision",
           "cpu_class", "engine_help", "engine_spec", "engines", "engines_that", "int8_note", "note_if_int8_is_slower",
           "option_choices", "quantize_int8", "register"]
