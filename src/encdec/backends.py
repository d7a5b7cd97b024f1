"""The backends, declared in one place: one ``Backend`` a ``register(...)`` line here, or one entry point of another
package. A backend is an inference engine (the class that decodes: ``--engine NAME``) with, where it reads a folder
of its own, its export format (``encdec export --format``, the function that writes the folder), the file that marks
its folders (the export record) and what it supports. An export format with no engine of its own (the browser site)
is a backend without an engine class. Every list of choices (``--engine``, ``--quantize``, ``--dtype``, ``encdec
export --format`` and its ``--quantize``, ``encdec serve --model DIR,engine=E``), their help, folder detection
(``encdec.folders``) and every capability question (alignments, ensembles, model families) read this registry;
nothing outside a backend's own modules spells its name to decide what it is or can do.

Another package adds a backend without touching encdec through the entry-point group ``encdec.backends`` (found with
``importlib.metadata``, as pytest finds its plugins): each entry point names a mapping of ``Backend``'s fields, in a
module that imports the standard library only (so that ``encdec --help`` lists its choices at once); its engine and
exporter are imported only when used. An entry point that does not load is named in one line on stderr and skipped.

This module imports the standard library only: the command line (``encdec_cli``) reads it by file location, without
importing ``encdec`` (which imports torch), so that ``encdec --help`` lists the choices at once. The engine classes and
exporters are imported only when an engine is built or a folder exported (``Backend.engine_class``,
``Backend.export_function``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

ENTRY_POINT_GROUP = "encdec.backends"


@dataclass(frozen=True)
class Backend:
    """One backend: its engine (where its class lives, what it supports), its export and the files of its folders."""

    name: str  # --engine NAME (a backend without an engine: its export format's name)
    module: str | None = None  # the module that defines the engine class (imported when the engine is built)
    class_name: str | None = None  # the engine class, a subclass of encdec.inference.engines.Engine; None: no engine
    summary: str = ""  # what it decodes with, for --engine's help
    alignments: bool = False  # its teacher_forced pass returns the attention (alignments, heatmaps) of its torch model
    ensembles: bool = False  # it decodes several --model folders as one model
    quantize: tuple[str, ...] = ()  # --quantize choices
    quantize_note: str = ""  # what --quantize does with this engine, for its help
    dtypes: tuple[str, ...] = ("float32",)  # --dtype choices
    families: tuple[str, ...] | None = None  # the model types (config.model_type) it decodes; None: every family
    install: str | None = None  # how to install what it needs, for an engine that is an optional extra
    export_format: str | None = None  # encdec export --format NAME; None: the engine reads a model folder
    exporter: str | None = None  # "module:function" that `encdec export --format` calls: (model_dir, output_dir,
    #                              quantize, overwrite) -> the line it prints
    export_summary: str = ""  # what the format writes, for `encdec --help` and --format's help
    export_detail: str = ""  # more for --format's help
    export_quantize: tuple[str, ...] = ("float32",)  # how the export may store the weights, its default first
    marker: str | None = None  # the file that marks its export folders (the export record); None: no folder of its own
    source_key: tuple[str, ...] = ("source_folder",)  # where in the record the exported model folder is named
    model_files: tuple[str, ...] = ()  # glob patterns of the other files of its folders that decide translations
    folder_name: str = ""  # its folder in messages: "a CTranslate2" (export)
    output_suffix: str = ""  # the export folder a message suggests: MODEL_DIR-SUFFIX
    refusal: str | None = None  # the line for a model folder of a family it does not decode ({model_dir}: the folder)
    # int8 as measured (encdec.inference.engines.int8, docs/fast-inference.md): (model_type, CPU class) -> (the config
    # key that sizes the model, the smallest size from which int8 was faster than float32, the largest int8 / float32
    # time below it), by scripts/benchmark_int8.py; and the CPU classes where its int8 adds products in saturating
    # 16-bit pairs, with the largest logit difference from float32 measured there (scripts/int8_without_vnni.py)
    int8_measured: tuple[tuple[tuple[str, str], tuple[str, int, float]], ...] = ()
    int8_saturates: tuple[tuple[str, ...], float] | None = None

    def engine_class(self) -> type:
        """The engine class, its module imported now (an optional dependency is imported only by the engine)."""
        return getattr(importlib.import_module(self.module), self.class_name)

    def export_function(self) -> Callable[..., str]:
        """What ``encdec export --format`` calls, its module imported now."""
        module, function = self.exporter.split(":")
        return getattr(importlib.import_module(module), function)

    def source_of(self, record: Mapping[str, Any]) -> str | None:
        """The model folder that an export record of this backend names (``source_key``), if it names one."""
        for key in self.source_key:
            record = record.get(key) if isinstance(record, Mapping) else None
        return record if isinstance(record, str) else None


BACKENDS: dict[str, Backend] = {}  # name -> backend, in the order --engine and --format list them
DEFAULT_ENGINE = "torch"  # what --engine is when not given
BROKEN_ENTRY_POINTS: dict[str, str] = {}  # entry point -> why it did not load


def register(backend: Backend) -> Backend:
    """Declare a backend (a name declared again replaces the earlier declaration)."""
    BACKENDS[backend.name] = backend
    return backend


register(Backend("torch", "encdec.inference.engines.torch_engine", "TorchEngine", "the model's generate()",
                 alignments=True, ensembles=True, quantize=("int8",), dtypes=("float32", "bfloat16"),
                 quantize_note="dynamic int8 of the linear and LSTM/GRU layers",
                 int8_measured=((("transformer_seq2seq", "x86-vnni"), ("d_model", 192, 1.23)),
                                (("rnn_seq2seq", "x86-vnni"), ("hidden_size", 512, 3.78)))))
register(Backend("ctranslate2", "encdec.inference.engines.ctranslate2_engine", "CTranslate2Engine", "CTranslate2",
                 quantize=("int8",), quantize_note="int8 compute", dtypes=("float32", "bfloat16"),
                 families=("transformer_seq2seq",),
                 install="pip install 'encdec[ct2]'", export_format="ctranslate2",
                 exporter="encdec.ship.ctranslate2_export:export_command",
                 export_summary="CTranslate2 (Transformer)",
                 export_quantize=("float32", "int8", "int8_float32", "bfloat16", "float16"),
                 marker="encdec_export.json", model_files=("*.bin", "*vocabulary*"), folder_name="a CTranslate2",
                 # int8: 0.27 of the logits' range from float32 on the tests' tiny Transformer without VNNI, 0.007 with
                 output_suffix="ct2", int8_measured=((("transformer_seq2seq", "x86-vnni"), ("d_model", 192, 1.22)),),
                 int8_saturates=(("x86-avx2",), 0.27),
                 refusal="{model_dir} holds an RNN model, and CTranslate2 has no recurrent decoder: translate it with "
                         "`--engine torch` (add `--quantize int8` for speed), or export it with `--format onnx`."))
register(Backend("onnxruntime", "encdec.inference.engines.onnxruntime_engine", "OnnxRuntimeEngine",
                 "ONNX Runtime over a folder from `encdec export --format onnx`", quantize=("int8",),
                 quantize_note="checks that the export has int8 weights",
                 install="pip install 'encdec[onnx]'", export_format="onnx",
                 exporter="encdec.ship.onnx_export:export_command",
                 export_summary="ONNX (both families)", export_quantize=("float32", "int8"),
                 marker="encdec_onnx.json", source_key=("source_model", "path"), model_files=("*.onnx",),
                 folder_name="an ONNX", output_suffix="onnx"))
register(Backend("web", export_format="web", exporter="encdec.ship.web_export:export_command",
                 export_summary="a static site that translates in the browser",
                 export_detail="the ONNX export run by ONNX Runtime Web; serve it with any static file server",
                 export_quantize=("int8", "float32")))


def load_entry_points() -> None:
    """Register the backends of the entry-point group ``encdec.backends``: each names a mapping of ``Backend``'s
    fields. One that does not load is named in one line on stderr (once a process) and skipped."""
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            fields = point.load()
            register(Backend(**fields))
        except Exception as error:  # anything a third-party module raises: named, and the others still load
            where = f"{point.name} = {point.value}" + (f" (from {point.dist.name})" if point.dist else "")
            BROKEN_ENTRY_POINTS[where] = why = f"{type(error).__name__}: {error}".splitlines()[0]
            if where not in named_already():
                print(f"encdec: the backend entry point {where} in group {ENTRY_POINT_GROUP} does not load ({why}); "
                      "it is skipped: fix or uninstall its package.", file=sys.stderr)
                named_already().add(where)


def named_already() -> set[str]:
    """The broken entry points this process has named: one set for every copy of this file (the command line reads it
    before encdec is imported, under a name of its own), so that each is named once."""
    copies = [module for module in list(sys.modules.values())
              if getattr(module, "__file__", None) == __file__ and hasattr(module, "_NAMED")]
    return copies[0]._NAMED if copies else _NAMED


_NAMED: set[str] = set()
load_entry_points()


def engines() -> dict[str, Backend]:
    """The backends with an engine, by name (``--engine``'s choices)."""
    return {name: backend for name, backend in BACKENDS.items() if backend.class_name}


def export_formats() -> dict[str, Backend]:
    """The backends with an export, by ``--format`` name."""
    return {backend.export_format: backend for backend in BACKENDS.values() if backend.exporter}


def union(lists: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Every value of ``lists``, each once, in the order they first come."""
    return tuple(dict.fromkeys(value for values in lists for value in values))


def option_choices() -> dict[str, tuple[str, ...]]:
    """The choices of each engine option over every registered engine: ``engine``, ``quantize`` and ``dtype``, as
    ``--engine``/``--quantize``/``--dtype`` and ``encdec serve --model DIR,engine=E,quantize=Q,dtype=D`` offer them."""
    specs = list(engines().values())
    return {"engine": tuple(engines()), "quantize": union([spec.quantize for spec in specs]),
            "dtype": union([spec.dtypes for spec in specs])}


def engine_help() -> str:
    """``--engine``'s help: each engine and what it decodes with (and how to install it)."""
    return "; ".join(f"{spec.name}: {spec.summary}" + (f" ({spec.install})" if spec.install else "")
                     for spec in engines().values())


def quantize_help() -> str:
    """``--quantize``'s help for decoding: the engines that take each choice."""
    return "; ".join(f"{choice}: " + ", ".join(name + (f" ({spec.quantize_note})" if spec.quantize_note else "")
                                               for name, spec in engines().items() if choice in spec.quantize)
                     for choice in option_choices()["quantize"])


def export_help() -> dict[str, str]:
    """The help of ``encdec export``: its summary in ``encdec --help``, ``--format``'s and ``--quantize``'s."""
    formats = export_formats()
    summaries = [spec.export_summary for spec in formats.values()]

    def detail(spec: Backend) -> str:
        return (f", for --engine {spec.name}" if spec.class_name else "") + (
            f" ({spec.export_detail})" if spec.export_detail else "")

    return {"command": "export a model folder to " + " or ".join([", ".join(summaries[:-1]), summaries[-1]]
                                                                 if len(summaries) > 1 else summaries),
            "format": "; ".join(f"{name}: {spec.export_summary}{detail(spec)}" for name, spec in formats.items()),
            "quantize": "how the weights are stored: " + "; ".join(
                f"{name} takes {', '.join(spec.export_quantize)} (default {spec.export_quantize[0]})"
                for name, spec in formats.items())}


def engines_that(capability: str) -> list[str]:
    """The names of the engines that support ``capability`` (a ``Backend`` flag: ``alignments``, ``ensembles``)."""
    return [spec.name for spec in engines().values() if getattr(spec, capability)]


def export_kind(folder: Path) -> str | None:
    """The backend whose export ``folder`` is (the first whose marker file it holds), or None for a folder that is
    not an export."""
    return next((spec.name for spec in BACKENDS.values() if spec.marker and (folder / spec.marker).is_file()), None)


def marker_files() -> tuple[str, ...]:
    """The files that mark a backend's folder (the export records)."""
    return tuple(spec.marker for spec in BACKENDS.values() if spec.marker)


__all__ = ["BACKENDS", "BROKEN_ENTRY_POINTS", "DEFAULT_ENGINE", "ENTRY_POINT_GROUP", "Backend", "engine_help",
           "engines", "engines_that", "export_formats", "export_help", "export_kind", "load_entry_points",
           "marker_files", "option_choices", "quantize_help", "register"]
