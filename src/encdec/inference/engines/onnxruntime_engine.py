"""The ONNX Runtime engine: a folder written by ``encdec export --format onnx`` (``encdec.ship.onnx_export``; its layout
is ``onnx_layout``), either family, decoded by ONNX Runtime (an optional extra, ``encdec[onnx]``).

The search is transformers' own: ``OnnxSeq2SeqModel`` is a ``PreTrainedModel`` with ``GenerationMixin`` and no
weights, whose encoder runs the encoder graph and whose ``forward`` runs the decoder graph, so ``generate()`` does
greedy search, beam search, sampling, n-best lists and scores over the graphs exactly as over the torch model. The
state between two steps (the Transformer's self-attention keys and values, the RNN's recurrent state) travels in an
``OnnxStateCache``, a ``transformers.Cache`` whose one layer is a recurrent-state layer (as the RNN's own cache,
``models.rnn_cache``) holding every state tensor batch first: beam search's reordering, expansion and selection are
one gather along axis 0 of each. The encoder outputs travel as ``encoder_outputs``, whose top-level tensors
``generate()`` expands for beams itself.

The ``onnxruntime`` module is imported only when this engine (or an export) is used (``require_onnxruntime``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    GenerationConfig,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.cache_utils import Cache
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils import ModelOutput

from ...decoding_options import with_budget
from ...errors import EncdecError, InputFileError
from ...folders import require_model_folder
from ...models.compat import CACHE_NAME, cache_field
from ...models.rnn_cache import StateLayer
from ...tokenization import check_tokenizer_matches_model
from .int8 import CPU_CLASSES, cpu_class, note_once
from .interface import Engine, check_positions, check_precision
from .onnx_layout import BACKEND, EMPTY, EXPORT_ID_KEY, MANIFEST, OnnxLayout, read_layout

ORT_INSTALL = BACKEND.install
REDO = f"export the model again with `encdec export --format {BACKEND.export_format}`"


class OnnxRuntimeMissing(EncdecError):
    """ONNX Runtime (or onnx, for an export) is needed and not installed."""


def require_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or a one-line error that says how to install it."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as error:
        raise OnnxRuntimeMissing(f"ONNX Runtime is not installed; install the extra with `{ORT_INSTALL}`.") from error


def ort_session(path: Path, threads: int) -> Any:
    """An ONNX Runtime session over the graph ``path`` on the CPU, ``threads`` threads within an operator (as many as
    torch would use) and one between operators; a one-line error naming the file when ONNX Runtime refuses it (a
    corrupt file, an opset it does not implement)."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own Fail, InvalidGraph, InvalidProtobuf, NotImplemented
        reason = " ".join(str(error).split())[:300]
        raise InputFileError(f"ONNX Runtime {ort.__version__} cannot load {path} ({reason}); {REDO}.") from error


class OnnxStateLayer(StateLayer):
    """The decoder's state between two calls, as one of transformers' recurrent-state layers: the named tensors the
    decoder graph returned (``present.*``), batch first, and the number of target tokens consumed. Every batch
    operation of ``generate()`` is a gather along axis 0 of each tensor."""

    is_croppable = False  # only the latest state is kept

    def __init__(self) -> None:
        super().__init__()
        self.tensors: dict[str, torch.Tensor] = {}  # past.NAME -> (B, ...)
        self.consumed = 0

    def write(self, tensors: dict[str, torch.Tensor], new_tokens: int) -> None:
        if len(tensors) != len(self.tensors):
            self.count_states(len(tensors))
        self.tensors, self.consumed, self.is_initialized = tensors, self.consumed + new_tokens, True
        self.show(list(tensors.values()))

    def get_seq_length(self) -> int:
        return self.consumed

    def map_batch(self, fn: Any) -> None:
        if self.tensors:
            self.write({name: fn(tensor) for name, tensor in self.tensors.items()}, 0)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.map_batch(lambda tensor: tensor.index_select(0, beam_idx))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.map_batch(lambda tensor: tensor.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.map_batch(lambda tensor: tensor[indices])

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("The ONNX Runtime engine keeps only the latest decoder state.")

    def reset(self) -> None:
        self.tensors, self.consumed, self.is_initialized = {}, 0, False
        self.count_states(0)


class OnnxStateCache(Cache):
    """The decoder state as ``generate()`` passes it around (``cache``, ``past_key_values`` before 5.24)."""

    def __init__(self) -> None:
        super().__init__(layers=[OnnxStateLayer()])

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[0].consumed

    @property
    def is_empty(self) -> bool:
        return not self.layers[0].tensors


@dataclass
class OnnxEncoderOutput(ModelOutput):
    """The encoder graph's outputs by name (set as items beside this field); ``last_hidden_state`` is its first."""

    last_hidden_state: torch.FloatTensor | None = None


class OnnxEncoder:
    """The encoder graph, called as ``generate()`` calls a model's encoder."""

    main_input_name = "input_ids"

    def __init__(self, session: Any, layout: OnnxLayout) -> None:
        self.session, self.layout = session, layout

    def __call__(self, *args: Any, **kwargs: Any) -> OnnxEncoderOutput:
        return self.forward(*args, **kwargs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Any) -> OnnxEncoderOutput:
        """:param input_ids: (B, S) right-padded :return: the encoder outputs, named as the manifest names them"""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        outputs = self.session.run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})
        encoded = OnnxEncoderOutput(last_hidden_state=torch.from_numpy(outputs[0]))
        for name, value in zip(self.layout.encoder.outputs, outputs, strict=True):
            encoded[name] = torch.from_numpy(value)
        return encoded


class OnnxSeq2SeqModel(PreTrainedModel, GenerationMixin):
    """A weightless model over the two graphs of an export, for ``generate()`` (see the module docstring)."""

    main_input_name = "input_ids"
    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig, layout: OnnxLayout, encoder: Any, decoder: Any) -> None:
        super().__init__(config)
        self.layout, self.decoder_session = layout, decoder
        self.encoder = OnnxEncoder(encoder, layout)
        self.decoder_inputs = set(layout.decoder.inputs)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def get_encoder(self, modality: str | None = None) -> OnnxEncoder:
        return self.encoder

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """The state is the graphs' named tensors: generate must not make a ``DynamicCache``."""
        return False

    def _prepare_cache_for_generation(self, generation_config: GenerationConfig, model_kwargs: dict, *args: Any,
                                      **kwargs: Any) -> None:
        model_kwargs[CACHE_NAME] = OnnxStateCache()

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, encoder_outputs: OnnxEncoderOutput | None = None,
                cache: OnnxStateCache | None = None, past_key_values: OnnxStateCache | None = None,
                **kwargs: Any) -> Seq2SeqLMOutput:
        """The decoder graph over the new tokens ``decoder_input_ids`` (B, T), from the cache's state (a new cache:
        the first step's) :return: ``logits`` (B, T, V) and the cache, updated"""
        cache = cache if cache is not None else past_key_values
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        cache = cache if cache is not None else OnnxStateCache()
        logits = self.decode(decoder_input_ids, attention_mask, encoder_outputs, cache)
        return Seq2SeqLMOutput(logits=logits, **cache_field(cache))

    def decode(self, tokens: torch.Tensor, attention_mask: torch.Tensor, encoded: OnnxEncoderOutput,
               cache: OnnxStateCache) -> torch.Tensor:
        """Run the decoder graph over ``tokens`` (B, T): in one call, or a token a call where the graph takes one
        (``multi_token`` False). :return: the logits (B, T, V); the cache holds the state after them"""
        layout, layer = self.layout, cache.layers[0]
        state = layer.tensors if not cache.is_empty else {
            entry.past: (torch.zeros([len(tokens) if dim == "batch" else 0 if dim == "past_len" else dim
                                      for dim in entry.shape]) if entry.init == EMPTY else encoded[entry.init])
            for entry in layout.state}
        if attention_mask is None:
            attention_mask = torch.ones(encoded.last_hidden_state.shape[:2], dtype=torch.long)
        fixed = {"encoder_attention_mask": attention_mask, **{name: encoded[name] for name in
                                                               layout.decoder.encoder_inputs}}
        calls = [tokens] if layout.multi_token else tokens.split(1, dim=1)
        logits = []
        for call in calls:
            feeds = {"input_ids": call, **fixed, **state}
            outputs = self.decoder_session.run(None, {name: value.contiguous().numpy() for name, value in feeds.items()
                                                      if name in self.decoder_inputs})
            named = dict(zip(layout.decoder.outputs, outputs, strict=True))
            logits.append(torch.from_numpy(named["logits"]))
            state = {entry.past: torch.from_numpy(named[entry.present]) for entry in layout.state}
            layer.write(state, call.size(1))
        return logits[0] if len(logits) == 1 else torch.cat(logits, dim=1)


def check_graph(session: Any, path: Path, layout: OnnxLayout, inputs: list[str], outputs: list[str]) -> None:
    """The graph ``path`` belongs to this manifest: the same export id, the inputs and outputs it names, and logits as
    wide as the vocabulary; a one-line error naming the file otherwise."""
    found_id = session.get_modelmeta().custom_metadata_map.get(EXPORT_ID_KEY)
    if found_id != layout.export_id:
        raise InputFileError(f"{path} is not the graph that {MANIFEST} describes (it comes from another export: its "
                             f"export id is {found_id!r}, the manifest's {layout.export_id!r}); {REDO}.")
    names = ([node.name for node in session.get_inputs()], [node.name for node in session.get_outputs()])
    if names != (inputs, outputs):
        raise InputFileError(f"{path} takes {names[0]} and returns {names[1]}, not what {MANIFEST} says; {REDO}.")
    logits = {node.name: node.shape for node in session.get_outputs()}.get("logits")
    if logits is not None and logits[-1] != layout.vocab_size:
        raise InputFileError(f"{path} returns logits over {logits[-1]} tokens, but the model's vocabulary has "
                             f"{layout.vocab_size}; {REDO}.")


def full_range_int8_note(export_dir: Path, layout: OnnxLayout) -> str | None:
    """The note for an int8 export made before the export stored 7-bit weights (its manifest's check names no
    ``int8_weights``), on a CPU where its full-range weights saturate (x86 without VNNI); else None."""
    if layout.weights != "int8" or "int8_weights" in layout.check or cpu_class() != "x86-avx2":
        return None
    return (f"note: {export_dir} holds full-range int8 weights (an export before 7-bit ones), whose products "
            f"saturate on {CPU_CLASSES['x86-avx2']}: its outputs can be far from the model's; export it again with "
            "`encdec export --format onnx --quantize int8`")


class OnnxRuntimeEngine(Engine):
    """ONNX Runtime sessions over an exported folder, searched by transformers' ``generate()``."""

    name = "onnxruntime"

    def __init__(self, export_dir: str | os.PathLike, quantize: str | None = None, dtype: str | None = None,
                 threads: int | None = None) -> None:
        check_precision(self.spec, quantize, dtype)
        require_onnxruntime()
        export_dir = require_model_folder(export_dir, engine=self.name)
        self.layout = layout = read_layout(export_dir)
        if quantize == "int8" and layout.weights != "int8":
            raise EncdecError(f"{export_dir} holds float32 graphs; ONNX Runtime's int8 is chosen at export: export "
                              "with `encdec export --format onnx --quantize int8` and pass that folder.")
        note_once(full_range_int8_note(export_dir, layout))
        self.config = AutoConfig.from_pretrained(export_dir, trust_remote_code=True)
        if (self.config.model_type, self.config.vocab_size) != (layout.family, layout.vocab_size):
            raise InputFileError(f"{export_dir / MANIFEST} describes a {layout.family} model of {layout.vocab_size} "
                                 f"tokens, but config.json a {self.config.model_type} model of "
                                 f"{self.config.vocab_size}; {REDO}.")
        self.generation_config = GenerationConfig.from_pretrained(export_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(export_dir, trust_remote_code=True)
        try:
            check_tokenizer_matches_model(self.tokenizer, self.config)
        except ValueError as error:
            raise EncdecError(f"{export_dir}: {error}") from error
        threads = torch.get_num_threads() if threads is None else threads  # as many as torch would use
        sessions = []
        for graph in (layout.encoder, layout.decoder):
            session = ort_session(export_dir / graph.file, threads)
            check_graph(session, export_dir / graph.file, layout, graph.inputs, graph.outputs)
            sessions.append(session)
        self.model = OnnxSeq2SeqModel(self.config, layout, *sessions)
        self.model.generation_config = self.generation_config

    @classmethod
    def load(cls, model_dirs: Sequence[str | os.PathLike], quantize: str | None = None, dtype: str | None = None,
             device: str = "cpu") -> tuple[OnnxRuntimeEngine, PreTrainedTokenizerBase]:
        """The folder of ``model_dirs`` (one), written by ``encdec export --format onnx``; on the CPU."""
        if device.split(":")[0] != "cpu":
            raise EncdecError(f"The onnxruntime engine runs on the CPU; got device {device!r}.")
        engine = cls(model_dirs[0], quantize=quantize, dtype=dtype)
        return engine, engine.tokenizer

    @property
    def precision(self) -> str:
        """``float32``, or ``int8_float32`` for int8 weights (activations quantized on the fly, the rest float32)."""
        return "int8_float32" if self.layout.weights == "int8" else "float32"

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, budget: int,
                 settings: dict[str, Any]) -> list[list[int]]:
        """``generate()`` over the graphs. :param input_ids: (B, S) right-padded :return: each output's ids"""
        check_positions(self.layout.max_positions, int(attention_mask.sum(dim=1).max()), budget, "ONNX")
        with torch.inference_mode():
            generated = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                            **with_budget(settings, budget))  # (B x n, 1 + T)
        return generated.tolist()

    def teacher_forced(self, source_ids: list[int], target_ids: list[int], alignment: bool = False
                       ) -> tuple[list[float], None]:
        """Each target token's log-probability, from one decoder pass over the start token and the target (a token a
        call where the graph takes one). The graphs return no attention, so ``alignment`` is refused."""
        if alignment:
            raise EncdecError("The onnxruntime engine returns no alignments; use the torch engine for them.")
        source = torch.tensor([source_ids])
        check_positions(self.layout.max_positions, len(source_ids), len(target_ids), "ONNX")
        encoded = self.model.encoder(source, torch.ones_like(source))
        tokens = torch.tensor([[self.config.decoder_start_token_id, *target_ids[:-1]]])  # (1, T): shifted right
        logits = self.model.decode(tokens, torch.ones_like(source), encoded, OnnxStateCache())
        log_probs = logits[0].float().log_softmax(-1)  # (T, V)
        return log_probs.gather(-1, torch.tensor(target_ids)[:, None])[:, 0].tolist(), None


__all__ = ["ORT_INSTALL", "OnnxRuntimeEngine", "OnnxRuntimeMissing", "OnnxSeq2SeqModel", "OnnxStateCache",
           "ort_session", "require_onnxruntime"]
