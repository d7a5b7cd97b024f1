"""Inference engines: what turns a batch of source ids into output ids. ``inference.translate`` does the rest
(tokenising, batching longest first, decoding), the same for every engine.

- ``registry.py``: each engine declared in one line (``EngineSpec``): its name, its class, and what it supports
  (alignments, ensembles, quantize modes, dtypes, model families, its install hint). The command line's and the
  server's choices and every capability question read it.
- ``interface.py``: ``Engine``, the interface every engine implements (``load``, ``generate``, ``teacher_forced``,
  ``precision``, ``config``, ``generation_config``; ``spec``, its registry entry).
- ``torch_engine.py``: ``TorchEngine``, the model's ``generate()``, in float32, in bfloat16 (``dtype="bfloat16"``) or
  with the linear and LSTM/GRU layers in dynamic int8 (``quantize="int8"``).
- ``ctranslate2_engine.py``: ``CTranslate2Engine``, a folder written by ``encdec export --format ctranslate2``
  (``encdec.ship.export``), decoded by CTranslate2 (an optional extra, ``encdec[ct2]``), with its weights computed in
  float32, int8 or bfloat16.
- ``onnxruntime_engine.py``: ``OnnxRuntimeEngine``, a folder written by ``encdec export --format onnx``
  (``encdec.ship.onnx_export``), either family, searched by transformers' ``generate()`` over ONNX Runtime sessions
  (an optional extra, ``encdec[onnx]``), with float32 or int8 weights; ``onnx_layout.py``: that folder's layout and
  manifest, which the export writes and the engine (and the browser runtime) reads.
- ``int8.py``: the sizes below which int8 measured slower than float32, and the note that says so.

Each engine maps the decoding options it has (beam size, length penalty, max new tokens, number of returned
sequences, sampling) and refuses the others in one line that names the option. ``load_engine``
(``encdec.inference``) builds the engine a name asks for from its registry entry, importing its module then: the
``ctranslate2`` module is imported only when the CTranslate2 engine is used, ``onnxruntime`` only when the ONNX Runtime
engine is.
"""

from __future__ import annotations

from typing import Any

from ...folders import EXPORT_INFO
from .ctranslate2_engine import (
    CT2_INSTALL,
    CT2_OPTIONS,
    GENERATE_DEFAULTS,
    CTranslate2Engine,
    CTranslate2Missing,
    read_export_info,
    require_ctranslate2,
)
from .int8 import CPU_CLASSES, INT8_DOC, INT8_MEASURED, cpu_class, int8_note, note_if_int8_is_slower
from .interface import Engine, check_precision, engine_spec
from .registry import (
    DEFAULT_ENGINE,
    ENGINE_REGISTRY,
    EngineSpec,
    engine_help,
    engines_that,
    option_choices,
    register,
)
from .torch_engine import TorchEngine, alignment_matrix, quantize_int8

# the choices of the engines registry.py declares, under their names of before the registry (option_choices() also
# counts an engine registered after this import)
ENGINES = option_choices()["engine"]
QUANTIZE_CHOICES = option_choices()["quantize"]
DTYPE_CHOICES = option_choices()["dtype"]


def as_engine(model: Any) -> Engine:
    """An engine as it is, a model (or an ensemble) as a ``TorchEngine``."""
    return model if isinstance(model, Engine) else TorchEngine(model)


__all__ = ["CPU_CLASSES", "CT2_INSTALL", "CT2_OPTIONS", "DEFAULT_ENGINE", "DTYPE_CHOICES", "ENGINES",
           "ENGINE_REGISTRY", "EXPORT_INFO", "GENERATE_DEFAULTS", "INT8_DOC", "INT8_MEASURED", "QUANTIZE_CHOICES",
           "CTranslate2Engine", "CTranslate2Missing", "Engine", "EngineSpec", "TorchEngine", "alignment_matrix",
           "as_engine", "check_precision", "cpu_class", "engine_help", "engine_spec", "engines_that", "int8_note",
           "note_if_int8_is_slower", "option_choices", "quantize_int8", "read_export_info", "register",
           "require_ctranslate2"]
