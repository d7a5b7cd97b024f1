"""The inference engines, declared: one ``EngineSpec`` a line in ``ENGINE_REGISTRY``, naming the engine, the class
that implements it and what it supports. Every list of choices (``--engine``, ``--quantize``, ``--dtype``, ``encdec
serve --model DIR,engine=E``) and every capability question (alignments, ensembles, model families) reads this
registry; nothing else spells an engine's name to decide what it can do.

Adding an engine is one module holding its class (a subclass of ``encdec.inference.engines.Engine``) and one
``register(EngineSpec(...))`` line here.

This module imports the standard library only: the command line (``encdec_cli``) reads it by file location, without
importing ``encdec`` (which imports torch), so that ``encdec --help`` lists the choices at once. The engine classes are
imported only when an engine is built (``EngineSpec.engine_class``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSpec:
    """One engine: its name, where its class lives, and what it supports."""

    name: str  # --engine NAME
    module: str  # the module that defines the engine class (imported when the engine is built)
    class_name: str  # the engine class: a subclass of encdec.inference.engines.Engine
    summary: str  # what it decodes with, for --engine's help
    alignments: bool  # its teacher_forced pass returns the attention (alignments, heatmaps) of its torch `model`
    ensembles: bool  # it decodes several --model folders as one model
    quantize: tuple[str, ...] = ()  # --quantize choices
    dtypes: tuple[str, ...] = ("float32",)  # --dtype choices
    families: tuple[str, ...] | None = None  # the model types (config.model_type) it decodes; None: every family
    install: str | None = None  # how to install what it needs, for an engine that is an optional extra

    def engine_class(self) -> type:
        """The engine class, its module imported now (an optional dependency is imported only by the engine)."""
        return getattr(importlib.import_module(self.module), self.class_name)


ENGINE_REGISTRY: dict[str, EngineSpec] = {}  # name -> spec, in the order --engine lists them
DEFAULT_ENGINE = "torch"  # what --engine is when not given


def register(spec: EngineSpec) -> EngineSpec:
    """Declare an engine (a name declared again replaces the earlier declaration)."""
    ENGINE_REGISTRY[spec.name] = spec
    return spec


register(EngineSpec("torch", "encdec.inference.engines.torch_engine", "TorchEngine", "the model's generate()",
                    alignments=True, ensembles=True, quantize=("int8",), dtypes=("float32", "bfloat16")))
register(EngineSpec("ctranslate2", "encdec.inference.engines.ctranslate2_engine", "CTranslate2Engine", "CTranslate2",
                    alignments=False, ensembles=False, quantize=("int8",), dtypes=("float32", "bfloat16"),
                    families=("transformer_seq2seq",), install="pip install 'encdec[ct2]'"))
register(EngineSpec("onnxruntime", "encdec.inference.engines.onnxruntime_engine", "OnnxRuntimeEngine",
                    "ONNX Runtime over a folder from `encdec export --format onnx`", alignments=False, ensembles=False,
                    quantize=("int8",), install="pip install 'encdec[onnx]'"))


def union(lists: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Every value of ``lists``, each once, in the order they first come."""
    return tuple(dict.fromkeys(value for values in lists for value in values))


def option_choices() -> dict[str, tuple[str, ...]]:
    """The choices of each engine option over every registered engine: ``engine``, ``quantize`` and ``dtype``, as
    ``--engine``/``--quantize``/``--dtype`` and ``encdec serve --model DIR,engine=E,quantize=Q,dtype=D`` offer them."""
    specs = list(ENGINE_REGISTRY.values())
    return {"engine": tuple(ENGINE_REGISTRY), "quantize": union([spec.quantize for spec in specs]),
            "dtype": union([spec.dtypes for spec in specs])}


def engine_help() -> str:
    """``--engine``'s help: each engine and what it decodes with (and how to install it)."""
    return "; ".join(f"{spec.name}: {spec.summary}" + (f" ({spec.install})" if spec.install else "")
                     for spec in ENGINE_REGISTRY.values())


def engines_that(capability: str) -> list[str]:
    """The names of the engines that support ``capability`` (an ``EngineSpec`` flag: ``alignments``, ``ensembles``)."""
    return [spec.name for spec in ENGINE_REGISTRY.values() if getattr(spec, capability)]


__all__ = ["DEFAULT_ENGINE", "ENGINE_REGISTRY", "EngineSpec", "engine_help", "engines_that", "option_choices",
           "register"]
