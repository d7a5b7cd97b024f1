"""Export a model folder, either family, to ONNX (``encdec export --format onnx``): an encoder graph and one decoder
graph for every step, in the layout of ``encdec.inference.engines.onnx_layout`` (optimum's file names, with a merged
decoder), for ONNX Runtime (``--engine onnxruntime``) and ONNX Runtime Web in a browser.

The graphs are traced by ``torch.onnx.export``'s TorchScript exporter (``dynamo=False``; the dynamo exporter trips on
the RNN encoder's padding check and packed sequences) from the wrappers of ``encdec.ship.onnx_graphs``, which run the
model's own code, at opset 17, with the batch, source, target and past lengths dynamic. The Transformer is traced
with its eager attention (the same math as SDPA, written out), so that no backend-specific shortcut is baked in.

The export checks itself before anything is published: it runs the graphs with ONNX Runtime over a padded batch the
tracing never saw (the first step from the empty or initial state, a later step with a past, a teacher-forced call
of several tokens where the decoder takes them) and refuses, naming the graph, when the encoder's outputs or the
logits differ from torch's by more than ``TOLERANCE`` (float32). With ``quantize="int8"`` the checked float32 graphs
are then quantized by ONNX Runtime's dynamic quantization (weights of every MatMul, and of the LSTM, stored in int8;
activations quantized on the fly; Jacob et al. 2018), and the int8 copy is checked against torch more loosely: the
largest logit difference within ``INT8_TOLERANCE`` of the reference logits' range.

The folder is written under a temporary name beside the output and swapped in once complete and checked; a failed
export leaves nothing behind.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import uuid
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from ..errors import EncdecError
from ..folders import model_identity, require_model_folder
from ..inference import load_model_and_tokenizer
from ..inference.engines.onnx_layout import (
    BACKEND,
    DECODER_FILE,
    EMPTY,
    ENCODER_FILE,
    EXPORT_ID_KEY,
    OPSET,
    Graph,
    OnnxLayout,
    StateEntry,
)
from ..inference.engines.onnxruntime_engine import ORT_INSTALL, OnnxRuntimeMissing, ort_session, require_onnxruntime
from ..io_utils import refuse_existing, refuse_overlap, replace_folder
from ..tokenization import TOKENIZER_FILES
from .onnx_graphs import SOURCE_INPUTS, GraphNames, graph_modules, graph_names

QUANTIZE_CHOICES = BACKEND.export_quantize  # float32, int8
TOLERANCE = 1e-4  # float32: the largest |logit| (and encoder output) difference to torch accepted
INT8_TOLERANCE = 0.1  # int8: the largest |logit| difference accepted, as a share of the reference logits' range
COPIED_FILES = ("config.json", "generation_config.json", "special_tokens_map.json", "added_tokens.json",
                *TOKENIZER_FILES)
TRACE_SOURCE_LENGTHS = (5, 3)  # the padded batch the graphs are traced with
CHECK_SOURCE_LENGTHS = (7, 4, 1)  # and the one they are checked with: other sizes, so a baked-in size shows
CHECK_PREFIX = 4  # decoder positions checked: the start token and three more


class ExportCheckFailed(EncdecError):
    """The exported graphs do not compute what the model computes."""


def require_onnx() -> Any:
    """The ``onnx`` package (needed to write graphs), or a one-line error that says how to install it."""
    try:
        return importlib.import_module("onnx")
    except ImportError as error:
        raise OnnxRuntimeMissing(f"The ONNX export needs the onnx package; install the extra with `{ORT_INSTALL}`.") \
            from error


def export_onnx(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantize: str | None = None,
                overwrite: bool = False) -> Path:
    """Export the model in ``model_dir`` (either family) to the ONNX folder ``output_dir``: the two graphs, the
    manifest, and the model's config, generation config and tokenizer beside them; checked against torch, then
    swapped into place. ``quantize="int8"``: the graphs' weights in int8 (ONNX Runtime's dynamic quantization)."""
    quantize = quantize or "float32"
    if quantize not in QUANTIZE_CHOICES:
        raise EncdecError(f"`quantize` must be one of {list(QUANTIZE_CHOICES)} for the ONNX export, got {quantize!r}.")
    require_onnx()
    require_onnxruntime()
    model_dir = require_model_folder(model_dir)
    refuse_overlap(output_dir, [model_dir])  # before anything is loaded or replaced, --overwrite or not
    model, _ = load_model_and_tokenizer(model_dir)
    output_dir = refuse_existing(output_dir, overwrite, "export folder", folder=True)
    if model.config.model_type == "transformer_seq2seq":
        model.set_attn_implementation("eager")

    def write(staging: Path) -> None:
        layout = write_graphs(model, staging)
        layout = check_export(model, staging, layout, TOLERANCE)
        if quantize == "int8":
            quantize_graphs(staging, layout)
            refuse_saturating(staging, layout)
            layout = check_export(model, staging, replace(layout, weights="int8"), INT8_TOLERANCE)
            layout = replace(layout, check={**layout.check, "int8_weights": INT8_SCHEME.name})
        layout = replace(layout, source_model=model_identity(model_dir))
        layout.write(staging)
        for name in COPIED_FILES:
            if (model_dir / name).is_file():
                shutil.copy2(model_dir / name, staging / name)

    replace_folder(write, output_dir)
    return output_dir


def export_command(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantize: str, overwrite: bool) -> str:
    """``encdec export --format onnx`` (its backend's ``exporter``): export, and the line it prints."""
    out = export_onnx(model_dir, output_dir, quantize=quantize, overwrite=overwrite)
    return f"ONNX model ({quantize}) written to {out}; translate with `encdec translate --engine {BACKEND.name} " \
           f"--model {out}`"


def trace_batch(config: Any, lengths: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch of random ids (never the padding id) of ``lengths``, and its attention mask."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (len(lengths), max(lengths)), generator=generator)
    ids[ids == config.pad_token_id] = (config.pad_token_id + 1) % config.vocab_size
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, S)
    return ids.masked_fill(mask == 0, config.pad_token_id), mask


def first_state(state: list[StateEntry], encoded: dict[str, Any], batch: int, past_len: int,
                zeros: Any) -> dict[str, Any]:
    """``past.NAME`` -> the state before a decoder call: ``past_len`` long for an ``empty`` one (0 at the first step;
    tracing uses more, so that the length stays symbolic), else the encoder output it starts from."""
    sizes = {"batch": batch, "past_len": past_len}
    return {entry.past: zeros([sizes.get(dim, dim) for dim in entry.shape]) if entry.init == EMPTY
            else encoded[entry.init] for entry in state}


def dynamic_axes(names: GraphNames) -> tuple[dict[str, dict[int, str]], dict[str, dict[int, str]]]:
    """The dynamic axes of the encoder and decoder graphs, every input and output batch first."""
    source = {0: "batch", 1: "src_len"}
    encoded = {name: {0: "batch", **({names.source_axes[name]: "src_len"} if name in names.source_axes else {})}
               for name in names.encoder_outputs}
    encoder = {**dict.fromkeys(SOURCE_INPUTS, source), **encoded}
    decoder = {"input_ids": {0: "batch", 1: "tgt_len"}, "encoder_attention_mask": source, "logits": {0: "batch",
               1: "tgt_len"}, **{name: encoded[name] for name in names.decoder_encoder_inputs}}
    for entry in names.state:
        grows = entry.grow_axis is not None
        decoder[entry.past] = {0: "batch", **({entry.grow_axis: "past_len"} if grows else {})}
        decoder[entry.present] = {0: "batch", **({entry.grow_axis: "present_len"} if grows else {})}
    return encoder, decoder


def write_graphs(model: PreTrainedModel, folder: Path) -> OnnxLayout:
    """Trace both graphs into ``folder``; the layout of what was written (the inputs each graph kept: the exporter
    drops one that a graph never reads, such as the source mask of an RNN without attention)."""
    names = graph_names(model)
    encoder, decoder = graph_modules(model)
    encoder_axes, decoder_axes = dynamic_axes(names)
    ids, mask = trace_batch(model.config, TRACE_SOURCE_LENGTHS, seed=0)
    with torch.no_grad():
        encoded = dict(zip(names.encoder_outputs, encoder(ids, mask), strict=True))
    new_tokens = torch.full((len(TRACE_SOURCE_LENGTHS), 2 if names.multi_token else 1), model.config.eos_token_id)
    past = first_state(names.state, encoded, len(TRACE_SOURCE_LENGTHS), past_len=3, zeros=torch.zeros)
    decoder_args = (new_tokens, mask, *(encoded[name] for name in names.decoder_encoder_inputs), *past.values())
    export_id = uuid.uuid4().hex
    export_graph(encoder, (ids, mask), SOURCE_INPUTS, names.encoder_outputs, encoder_axes, folder / ENCODER_FILE,
                 export_id)
    export_graph(decoder, decoder_args, names.decoder_inputs, names.decoder_outputs, decoder_axes,
                 folder / DECODER_FILE, export_id)
    kept = graph_inputs(folder / DECODER_FILE)
    config = model.config
    return OnnxLayout(
        family=config.model_type, weights="float32",
        encoder=Graph(ENCODER_FILE, graph_inputs(folder / ENCODER_FILE), names.encoder_outputs),
        decoder=Graph(DECODER_FILE, kept, names.decoder_outputs,
                      [name for name in names.decoder_encoder_inputs if name in kept]),
        state=names.state, decoder_start_token_id=config.decoder_start_token_id, eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id, vocab_size=config.vocab_size, export_id=export_id,
        multi_token=names.multi_token, max_positions=getattr(config, "max_position_embeddings", None))


def export_graph(module: torch.nn.Module, args: tuple, input_names: list[str], output_names: list[str],
                 axes: dict[str, dict[int, str]], path: Path, export_id: str) -> None:
    """One graph, traced, with ``export_id`` in its metadata (the manifest names the same one)."""
    onnx = require_onnx()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about the Python branches the wrappers take, as intended
        torch.onnx.export(module, args, str(path), input_names=input_names, output_names=output_names,
                          dynamic_axes={name: axes[name] for name in (*input_names, *output_names)},
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)
    graph = onnx.load(str(path))
    drop_copies(graph.graph)
    graph.metadata_props.add(key=EXPORT_ID_KEY, value=export_id)
    onnx.save(graph, str(path))


def drop_copies(graph: Any) -> None:
    """Remove from ``graph`` (an ``onnx.GraphProto``), in place, every ``Concat`` of a single input: a copy of it.
    The tracer writes one where the model's cache concatenates onto an empty one (the cross-attention keys and values
    and the first past key, stored into fresh ``DynamicCache`` layers), and ONNX Runtime runs it as a copy of the whole
    tensor at every step. Its readers read its input instead; one that is a graph output becomes an ``Identity``."""
    outputs = {value.name for value in graph.output}
    renamed: dict[str, str] = {}
    kept = []
    for node in graph.node:
        for index, name in enumerate(node.input):
            node.input[index] = renamed.get(name, name)
        if node.op_type == "Concat" and len(node.input) == 1:
            if node.output[0] not in outputs:
                renamed[node.output[0]] = node.input[0]
                continue
            node.op_type = "Identity"
            del node.attribute[:]
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def graph_inputs(path: Path) -> list[str]:
    """The names of a graph file's inputs, in its order."""
    return [node.name for node in require_onnx().load(str(path), load_external_data=False).graph.input]


@dataclass(frozen=True)
class Int8Scheme:
    """How ONNX Runtime's dynamic quantization stores the weights; activations are quantized to uint8 at run time
    either way (``DynamicQuantizeLinear`` gives only uint8). ``signed``: int8 weights (``QInt8``, the U8S8 pairing),
    else uint8 ones (``QUInt8``, U8U8); ``reduce_range``: 7-bit weights (int8 in -64..64); ``per_channel``: one scale
    per output channel of a MatMul or LSTM, else one per tensor."""

    signed: bool
    reduce_range: bool
    per_channel: bool

    @property
    def name(self) -> str:
        return (f"{'U8S8' if self.signed else 'U8U8'}{', 7-bit weights' if self.reduce_range else ''}, "
                f"{'per channel' if self.per_channel else 'per tensor'}")


INT8_SCHEMES = {f"{pairing}{'-7bit' if reduced else ''}{'' if per_channel else '-per-tensor'}":
                Int8Scheme(pairing == "u8s8", reduced, per_channel)
                for pairing in ("u8s8", "u8u8") for reduced in ((False, True) if pairing == "u8s8" else (False,))
                for per_channel in (True, False)}
INT8_SCHEME = INT8_SCHEMES["u8s8-7bit"]  # the export's: why, in quantize_graphs
INT16_MAX = 32767  # the largest sum x86's pairwise multiply-add without VNNI (vpmaddubsw) holds
UINT8_MAX = 255  # the largest activation a weight meets
# the integer ops quantize_dynamic writes (and ONNX Runtime fuses them into): input index of each int8 weight, and
# the axis its products are summed over
INTEGER_WEIGHTS = {"MatMulInteger": ((1, 0),), "DynamicQuantizeMatMul": ((1, 0),),
                   "MatMulIntegerToFloat": ((1, 0),), "DynamicQuantizeLSTM": ((1, 1), (2, 1))}


def quantize_graphs(folder: Path, layout: OnnxLayout, scheme: Int8Scheme = INT8_SCHEME) -> None:
    """Both graphs with their weights in int8, in place: ONNX Runtime's dynamic quantization of every MatMul and
    LSTM (GRU has no integer kernel in ONNX Runtime and stays float32), and of the embedding tables (``Gather``:
    stored in int8, dequantized row by row as they are read), which are most of a small model's bytes.

    The scheme (``INT8_SCHEME``) is U8S8 with 7-bit weights, one scale per output channel: signed weights in -64..64,
    activations quantized to uint8 at run time. The 7 bits are what makes it right on every CPU: without VNNI
    (x86 with AVX2 only, or AVX-512 before Cascade Lake), ONNX Runtime's U8S8 kernel multiplies with ``vpmaddubsw``,
    which adds two adjacent uint8 x int8 products into a saturating int16; with full-range weights 255 x (127 + 127)
    overflows it and the outputs drift from the model's (an export refused on an AVX2-only AMD EPYC: encoder outputs
    0.95 away), where 255 x (64 + 64) = 32,640 always fits. VNNI, ARM and WebAssembly kernels add in int32 and give
    the same integers (measured under QEMU's AVX2-only Haswell: docs/fast-inference.md#int8-on-every-cpu), at the
    speed of full-range U8S8 (the same kernels) and the demos' BLEU. U8U8 (unsigned weights) avoids the pairing for
    MatMuls only: ONNX Runtime quantizes an LSTM's weights to full-range int8 whatever the weight type.

    The weights of MatMul and LSTM have one scale per output channel: with one per tensor, the RNN lost 0.37 BLEU at
    beam 5 on Multi30k (0.05 per channel, both full-range), at the same speed; ONNX Runtime quantizes a Gather's
    table per tensor either way. ``scheme``: another (the benchmark's comparison); ``saturating_weights`` finds what
    a scheme left that could overflow."""
    require_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for graph in (layout.encoder, layout.decoder):
        path = folder / graph.file
        quantized = path.with_suffix(".int8.onnx")
        logging.disable(logging.WARNING)  # its advice to pre-process (shape inference) is for convolutional models
        try:
            quantize_dynamic(path, quantized, weight_type=QuantType.QInt8 if scheme.signed else QuantType.QUInt8,
                             per_channel=scheme.per_channel, reduce_range=scheme.reduce_range,
                             op_types_to_quantize=["MatMul", "LSTM", "Gather"])
        finally:
            logging.disable(logging.NOTSET)
        os.replace(quantized, path)


def saturating_weights(path: Path) -> list[str]:
    """The int8 weights of the graph at ``path`` whose products with uint8 activations (0..255) can overflow int16
    when two of them are added, as x86's U8S8 kernels without VNNI add them: any two same-signed weights of one
    output channel (along the axis its products are summed over) whose sum x 255 exceeds 32,767, whichever two a
    kernel pairs. Unsigned (U8U8) weights are never paired that way; every name is an initializer's."""
    graph = require_onnx().load(str(path)).graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    found = []
    for node in graph.node:
        for index, axis in INTEGER_WEIGHTS.get(node.op_type, ()):
            tensor = initializers.get(node.input[index]) if index < len(node.input) else None
            if tensor is None or tensor.name in found:
                continue
            weights = require_onnx().numpy_helper.to_array(tensor)
            if weights.dtype == np.int8 and UINT8_MAX * largest_pair(weights, axis) > INT16_MAX:
                found.append(tensor.name)
    return found


def largest_pair(weights: np.ndarray, axis: int) -> int:
    """The largest |sum| of two same-signed entries of ``weights`` along ``axis`` (one output channel's)."""
    ordered = np.sort(weights.astype(np.int32), axis=axis)
    count = ordered.shape[axis]
    lowest = np.take(ordered, range(min(2, count)), axis=axis).clip(max=0).sum(axis=axis)
    highest = np.take(ordered, range(max(0, count - 2), count), axis=axis).clip(min=0).sum(axis=axis)
    return int(max(-lowest.min(), highest.max()))


def refuse_saturating(folder: Path, layout: OnnxLayout) -> None:
    """An ``ExportCheckFailed`` where an int8 graph of ``folder`` could overflow 16-bit sums (``saturating_weights``):
    it would be right on this CPU and wrong on one without VNNI."""
    for graph in (layout.encoder, layout.decoder):
        found = saturating_weights(folder / graph.file)
        if found:
            raise ExportCheckFailed(
                f"The int8 export of {graph.file} has weights ({found[0]}, {len(found)} in all) whose products can "
                "overflow 16-bit sums on x86 CPUs without VNNI; nothing was written. Please report it with the "
                "model's config.json.")


def check_export(model: PreTrainedModel, folder: Path, layout: OnnxLayout, tolerance: float) -> OnnxLayout:
    """Run the graphs of ``folder`` with ONNX Runtime and compare with torch (see the module docstring); the layout
    with what was found (``check``), or an ``ExportCheckFailed`` naming the graph. float32: the encoder outputs and
    the logits within ``tolerance``; int8: the logits within ``tolerance`` x the range of torch's."""
    encoder, decoder = graph_modules(model)
    ids, mask = trace_batch(model.config, CHECK_SOURCE_LENGTHS, seed=1)
    prefix = torch.cat([torch.full((len(ids), 1), model.config.decoder_start_token_id),
                        trace_batch(model.config, (CHECK_PREFIX - 1,) * len(ids), seed=2)[0]], dim=1)  # (B, 4)
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=mask, decoder_input_ids=prefix).logits.numpy()  # (B, 4, V)
        expected = [tensor.numpy() for tensor in encoder(ids, mask)]
    sessions = {graph.file: ort_session(folder / graph.file, threads=1) for graph in (layout.encoder, layout.decoder)}
    encoded = dict(zip(layout.encoder.outputs, sessions[ENCODER_FILE].run(None, {"input_ids": ids.numpy(),
                                                                                   "attention_mask": mask.numpy()}),
                       strict=True))
    def bound(values: list[np.ndarray]) -> float:  # float32: the tolerance; int8: a share of the values' range
        return tolerance if layout.weights == "float32" else tolerance * max(float(np.ptp(v)) for v in values)

    encoder_diff = max(float(np.abs(encoded[name] - value).max()) for name, value in
                       zip(layout.encoder.outputs, expected, strict=True))
    if encoder_diff > bound(expected):
        raise ExportCheckFailed(mismatch(ENCODER_FILE, "outputs", encoder_diff, bound(expected), layout.weights))
    calls = [[0], [1], list(range(2, CHECK_PREFIX))] if layout.multi_token else [[i] for i in range(CHECK_PREFIX)]
    state = first_state(layout.state, encoded, len(ids), past_len=0, zeros=lambda shape: np.zeros(shape, np.float32))
    logits_diff = 0.0
    for positions in calls:
        feeds = {"input_ids": prefix[:, positions].numpy(), "encoder_attention_mask": mask.numpy(),
                 **{name: encoded[name] for name in layout.decoder.encoder_inputs}, **state}
        outputs = dict(zip(layout.decoder.outputs, sessions[DECODER_FILE].run(None, {
            name: value for name, value in feeds.items() if name in layout.decoder.inputs}), strict=True))
        logits_diff = max(logits_diff, float(np.abs(outputs["logits"] - reference[:, positions]).max()))
        state = {entry.past: outputs[entry.present] for entry in layout.state}
    if logits_diff > bound([reference]):
        raise ExportCheckFailed(mismatch(DECODER_FILE, "logits", logits_diff, bound([reference]), layout.weights))
    check = {"max_abs_logit_diff": logits_diff, "max_abs_encoder_diff": encoder_diff, "tolerance": bound([reference]),
             "rule": ("max |output - torch's| <= tolerance" if layout.weights == "float32" else
                      f"max |output - torch's| <= {tolerance} x the range of torch's")}
    return replace(layout, check=check)


def mismatch(file: str, what: str, found: float, tolerance: float, weights: str) -> str:
    return (f"The ONNX export does not compute what the model computes: {file} ({weights}) gives {what} up to "
            f"{found:.3g} away from torch's (tolerance {tolerance:.3g}); nothing was written. Please report it with "
            "the model's config.json.")


__all__ = ["INT8_SCHEME", "INT8_SCHEMES", "INT8_TOLERANCE", "QUANTIZE_CHOICES", "TOLERANCE", "ExportCheckFailed",
           "Int8Scheme", "check_export", "export_command", "export_onnx", "quantize_graphs", "require_onnx",
           "saturating_weights", "write_graphs"]
