"""encdec: from-scratch seq2seq models (Transformer, LSTM/GRU with attention) as first-class transformers models.

Importing the package registers every model family with ``AutoConfig``, ``AutoModel`` and
``AutoModelForSeq2SeqLM``, and marks the classes so that ``save_pretrained`` writes ``auto_map`` and copies
the code files for ``trust_remote_code`` loading; likewise the multilingual tokenizer and an imported Marian model's
tokenizer with ``AutoTokenizer``. It also registers the ``seq2seq-generation`` pipeline task.

The package is laid out by stage (docs/architecture.md): ``models/`` and ``data/``, then ``training/``, ``inference/``,
``serve/`` and ``ship/``, with ``recipes/`` for the jobs that chain them and shared helpers at the root.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer
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
from .models.configuration_seq2seq import Seq2SeqConfig
from .models.pipeline_seq2seq import Seq2SeqGenerationPipeline
from .models.tokenization_marian_import import MarianImportTokenizer
from .models.tokenization_multilingual import Seq2SeqMultilingualTokenizer
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

# `AutoTokenizer.from_pretrained(folder)` finds the class that `tokenizer_config.json` names (registered under the
# families' shared base config, which no folder's config is, so a bilingual folder's tokenizer loads as before;
# transformers looks a registered class up by its name, so the key keeps the last one registered, the multilingual
# one, and finds both); `save_pretrained` copies its file and writes `auto_map`, for `trust_remote_code` loading
# without encdec. The Marian one is the tokenizer of a model `encdec import` brought in.
for _tokenizer_class in (MarianImportTokenizer, Seq2SeqMultilingualTokenizer):
    AutoTokenizer.register(Seq2SeqConfig, tokenizer_class=_tokenizer_class, exist_ok=True)
    _tokenizer_class.register_for_auto_class("AutoTokenizer")

# `pipeline("seq2seq-generation", model=..., tokenizer=...)`; saving through the pipeline writes `custom_pipelines`
PIPELINE_REGISTRY.register_pipeline("seq2seq-generation", pipeline_class=Seq2SeqGenerationPipeline,
                                    pt_model=AutoModelForSeq2SeqLM, type="text")

__all__ = [
    "EnsembleForSeq2SeqLM",
    "MarianImportTokenizer",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "Seq2SeqGenerationPipeline",
    "Seq2SeqMultilingualTokenizer",
    "TransformerSeq2SeqConfig",
    "TransformerSeq2SeqForConditionalGeneration",
    "TransformerSeq2SeqModel",
    "__version__",
]
