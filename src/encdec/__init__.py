"""encdec: from-scratch seq2seq models (Transformer, LSTM/GRU with attention) as first-class transformers models.

Importing the package registers every model family with ``AutoConfig``, ``AutoModel`` and
``AutoModelForSeq2SeqLM``, and marks the classes so that ``save_pretrained`` writes ``auto_map`` and copies
the code files for ``trust_remote_code`` loading. It also registers the ``seq2seq-generation`` pipeline task.

The package is laid out by stage (docs/architecture.md): ``models/`` and ``data/``, then ``training/``, ``inference/``,
``serve/`` and ``ship/``, with ``recipes/`` for the jobs that chain them and shared helpers at the root. Modules that
once sat at the root keep their import paths (``encdec.engines``, ``encdec.serving``...): ``MOVED`` names where each
went, and importing the old name gives the very module that lives there now.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from .inference.ensemble import EnsembleForSeq2SeqLM
from .models import (
    RNNSeq2SeqConfig,
    RNNSeq2SeqForConditionalGeneration,
    RNNSeq2SeqModel,
    TransformerSeq2SeqConfig,
    TransformerSeq2SeqForConditionalGeneration,
    TransformerSeq2SeqModel,
)
from .models.pipeline_seq2seq import Seq2SeqGenerationPipeline
from .version import __version__

_FAMILIES = [
    (TransformerSeq2SeqConfig, TransformerSeq2SeqModel, TransformerSeq2SeqForConditionalGeneration),
    (RNNSeq2SeqConfig, RNNSeq2SeqModel, RNNSeq2SeqForConditionalGeneration),
]


def _register(config_cls: type, model_cls: type, lm_cls: type) -> None:
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    AutoModel.register(config_cls, model_cls, exist_ok=True)
    AutoModelForSeq2SeqLM.register(config_cls, lm_cls, exist_ok=True)
    # Hub folders: `auto_map` in config.json and the code files next to the weights
    config_cls.register_for_auto_class()
    model_cls.register_for_auto_class("AutoModel")
    lm_cls.register_for_auto_class("AutoModelForSeq2SeqLM")


for _family in _FAMILIES:
    _register(*_family)

# `pipeline("seq2seq-generation", model=..., tokenizer=...)`; saving through the pipeline writes `custom_pipelines`
PIPELINE_REGISTRY.register_pipeline("seq2seq-generation", pipeline_class=Seq2SeqGenerationPipeline,
                                    pt_model=AutoModelForSeq2SeqLM, type="text")

# where the modules of the flat layout before 0.2 live now; the old name is an alias of the new module
MOVED = {
    "encdec.alignment": "encdec.inference.alignment",
    "encdec.averaging": "encdec.training.averaging",
    "encdec.corpus": "encdec.inference.corpus",
    "encdec.decoding": "encdec.inference.decoding",
    "encdec.demo": "encdec.recipes.demo",
    "encdec.distill": "encdec.recipes.distill",
    "encdec.engines": "encdec.inference.engines",
    "encdec.ensemble": "encdec.inference.ensemble",
    "encdec.evaluation": "encdec.inference.evaluation",
    "encdec.export": "encdec.ship.ctranslate2_export",
    "encdec.fetch": "encdec.data.fetch",
    "encdec.hub": "encdec.ship.hub",
    "encdec.libretranslate": "encdec.serve.libretranslate",
    "encdec.plotting": "encdec.inference.plotting",
    "encdec.server": "encdec.serve.server",
    "encdec.serving": "encdec.serve",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name (``MOVED``) as the module that lives at the new one, so that ``encdec.engines`` and
    ``encdec.inference.engines`` are one module object: an attribute set on either (a test's monkeypatch) is seen
    through both. The new module is imported, not copied; only its name in ``sys.modules`` is added."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> object:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system is about to set the alias's spec on the module
        return module

    def exec_module(self, module: object) -> None:
        module.__spec__ = module.__spec__.loader_state  # type: ignore[attr-defined]  # its own again (reload uses it)


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())

__all__ = [
    "EnsembleForSeq2SeqLM",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "Seq2SeqGenerationPipeline",
    "TransformerSeq2SeqConfig",
    "TransformerSeq2SeqForConditionalGeneration",
    "TransformerSeq2SeqModel",
    "__version__",
]
