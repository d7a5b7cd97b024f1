"""The layout of an ONNX export folder (``encdec export --format onnx``), read and checked in one place: the export
(``encdec.ship.onnx_export``) writes it, the ONNX Runtime engine (``onnxruntime_engine``) and the browser runtime read
it. The protocol is ``docs/fast-inference.md#onnx-runtime``; in short:

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask`` (B, S) int64 -> every tensor the decoder reads that
  depends on the source alone, batch first;
- ``decoder_model_merged.onnx``: one graph for every step, the first one included (optimum's "merged decoder", without
  an If node): the new tokens ``input_ids`` (B, T), ``encoder_attention_mask`` (B, S), the encoder outputs it reads,
  and the state ``past.NAME`` -> ``logits`` (B, T, V) and ``present.NAME``;
- ``encdec_onnx.json``: this manifest, which names all of the above.

Every state tensor and every encoder output is batch first, so that beam search's expansion and reordering is one
gather along axis 0 for each. A state starts ``empty`` (zero long on its ``grow_axis``: the Transformer's key/value
cache) or as an encoder output (the RNN's initial state from the bridge).

This module is the protocol, not a runner: it imports neither onnx nor onnxruntime.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...backends import BACKENDS
from ...errors import InputFileError

BACKEND = BACKENDS["onnxruntime"]  # its declaration in encdec.backends: the engine, its export and its folders
MANIFEST = BACKEND.marker  # encdec_onnx.json: the manifest that marks an ONNX export folder

FORMAT = "encdec-onnx"
VERSION = 1
ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model_merged.onnx"
OPSET = 17
EMPTY = "empty"  # a state's ``init``: zero long on its grow axis
WEIGHTS = ("float32", "int8")
# the onnx metadata key, in both graphs, that ties them to their manifest (``export_id``)
EXPORT_ID_KEY = "encdec.export_id"


@dataclass(frozen=True)
class StateEntry:
    """One recurrent or cache tensor carried from a decoder call to the next."""

    name: str  # e.g. "self.0.key" (Transformer) or "hidden" (RNN)
    shape: list[int | str]  # symbolic dims as strings: "batch", "past_len"
    init: str  # EMPTY, or the encoder output the first step reads
    grow_axis: int | None = None  # the axis that grows by the new tokens (key/value caches); None: fixed shape

    @property
    def past(self) -> str:
        return f"past.{self.name}"

    @property
    def present(self) -> str:
        return f"present.{self.name}"

    def as_json(self) -> dict[str, Any]:
        entry = {"name": self.name, "past": self.past, "present": self.present, "shape": self.shape,
                 "init": self.init}
        return entry if self.grow_axis is None else {**entry, "grow_axis": self.grow_axis}


@dataclass(frozen=True)
class Graph:
    """One graph file and the names of its inputs and outputs, in the graph's order."""

    file: str
    inputs: list[str]
    outputs: list[str]
    encoder_inputs: list[str] = field(default_factory=list)  # decoder only: the encoder outputs it reads

    def as_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if key != "encoder_inputs" or value}


@dataclass(frozen=True)
class OnnxLayout:
    """The manifest of an export folder."""

    family: str  # config.model_type
    weights: str  # "float32" or "int8"
    encoder: Graph
    decoder: Graph
    state: list[StateEntry]
    decoder_start_token_id: int
    eos_token_id: int
    pad_token_id: int
    vocab_size: int
    export_id: str  # also in each graph's metadata (EXPORT_ID_KEY): a graph of another export is refused
    multi_token: bool = True  # the decoder takes T > 1 new tokens in one call (False: one token a call, see below)
    max_positions: int | None = None  # the longest source and the longest output, where the model has a limit
    opset: int = OPSET
    source_model: dict[str, Any] = field(default_factory=dict)  # the model folder's identity (folders.model_identity)
    check: dict[str, Any] = field(default_factory=dict)  # the export's self-check: differences found, tolerance

    def as_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "family": self.family, "opset": self.opset,
                "weights": self.weights, "encoder": self.encoder.as_json(), "decoder": self.decoder.as_json(),
                "state": [entry.as_json() for entry in self.state], "multi_token": self.multi_token,
                "decoder_start_token_id": self.decoder_start_token_id, "eos_token_id": self.eos_token_id,
                "pad_token_id": self.pad_token_id, "vocab_size": self.vocab_size, "max_positions": self.max_positions,
                "export_id": self.export_id, "source_model": self.source_model, "check": self.check}

    def write(self, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(self.as_json(), indent=2) + "\n", encoding="utf-8")


def read_layout(folder: str | Path) -> OnnxLayout:
    """The manifest of the export ``folder``, checked: its format and version, the graph files present, and every
    state and encoder input named where it must be. An ``InputFileError`` names the file and the fix otherwise."""
    path = Path(folder) / MANIFEST
    redo = "export the model again with `encdec export --format onnx`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(f"{path} is missing: {Path(folder)} is not an ONNX export of encdec; {redo}.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputFileError(f"{path} is not readable JSON ({error}); {redo}.") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputFileError(f"{path} is not an {FORMAT} manifest; {redo}.")
    if data.get("version") != VERSION:
        raise InputFileError(f"{path} is version {data.get('version')!r} of the {FORMAT} layout; this encdec reads "
                             f"version {VERSION}: {redo}.")
    try:
        layout = parse(data)
    except (KeyError, TypeError, ValueError) as error:
        raise InputFileError(f"{path} is incomplete or malformed ({type(error).__name__}: {error}); {redo}.") from error
    for graph in (layout.encoder, layout.decoder):
        if not (Path(folder) / graph.file).is_file():
            raise InputFileError(f"{Path(folder) / graph.file} (the {graph.file.split('_')[0]} graph) is missing; "
                                 f"{redo}.")
    return layout


def parse(data: dict[str, Any]) -> OnnxLayout:
    """The manifest's JSON as an ``OnnxLayout``; a ``KeyError``, ``TypeError`` or ``ValueError`` where it does not
    hold together."""
    encoder, decoder = Graph(**data["encoder"]), Graph(**data["decoder"])
    state = [StateEntry(entry["name"], list(entry["shape"]), entry["init"], entry.get("grow_axis"))
             for entry in data["state"]]
    if data["weights"] not in WEIGHTS:
        raise ValueError(f"weights {data['weights']!r} is not one of {list(WEIGHTS)}")
    for entry in state:
        if entry.past not in decoder.inputs or entry.present not in decoder.outputs:
            raise ValueError(f"the state {entry.name!r} is not both an input and an output of the decoder")
        if entry.init != EMPTY and entry.init not in encoder.outputs:
            raise ValueError(f"the state {entry.name!r} starts from {entry.init!r}, which the encoder does not output")
        if entry.init == EMPTY and entry.grow_axis is None:
            raise ValueError(f"the state {entry.name!r} starts empty but has no grow_axis")
    missing = [name for name in decoder.encoder_inputs if name not in encoder.outputs]
    if missing or "logits" not in decoder.outputs:
        raise ValueError(f"the decoder reads {missing} that the encoder does not output" if missing else
                         "the decoder has no `logits` output")
    return OnnxLayout(family=data["family"], weights=data["weights"], encoder=encoder, decoder=decoder, state=state,
                      decoder_start_token_id=int(data["decoder_start_token_id"]),
                      eos_token_id=int(data["eos_token_id"]), pad_token_id=int(data["pad_token_id"]),
                      vocab_size=int(data["vocab_size"]), export_id=str(data["export_id"]),
                      multi_token=bool(data.get("multi_token", True)), max_positions=data.get("max_positions"),
                      opset=int(data.get("opset", OPSET)), source_model=dict(data.get("source_model", {})),
                      check=dict(data.get("check", {})))


__all__ = ["BACKEND", "DECODER_FILE", "EMPTY", "ENCODER_FILE", "EXPORT_ID_KEY", "FORMAT", "MANIFEST", "OPSET",
           "VERSION", "WEIGHTS", "Graph", "OnnxLayout", "StateEntry", "read_layout"]
