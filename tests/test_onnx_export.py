"""``encdec export --format onnx``: every RNN variant (each attention, input feeding on and off, LSTM and GRU,
bidirectional, several layers, tied weights) and every Transformer switch exports in float32 and in int8, in the
layout the browser runtime reads, and checks itself against torch; a corrupted graph is caught and named, and every
bad input is refused in one line with nothing written or overwritten.

Random tiny models over the toy vocabulary: the self-check compares logits, which needs no trained model."""

from __future__ import annotations

import shutil

import onnx
import pytest
from onnx import numpy_helper

from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.folders import save_for_pipeline
from encdec.inference import load_model_and_tokenizer
from encdec.inference.engines.onnx_layout import DECODER_FILE, ENCODER_FILE, MANIFEST, read_layout
from encdec.ship import onnx_export
from encdec.ship.onnx_export import ExportCheckFailed, check_export, export_onnx, saturating_weights, write_graphs
from encdec_cli import main
from toy import (
    BOS,
    MARIAN_IDS,
    MARIAN_SWITCHES,
    RNN_VARIANTS,
    TEST_TRANSFORMER,
    TOY_IDS,
    VARIANT_RNN,
    digit_tokenizer,
    random_logits_bias,
    tiny_model,
)

TRANSFORMER_SWITCHES = {
    "post_ln_sinusoid_tied": {},  # the paper's
    "pre_ln_learned_gelu_untied": {"normalize_before": True, "position_embedding_type": "learned",
                                   "activation_function": "gelu", "tie_word_embeddings": False},
    "half_split_unscaled_1_layer": {"sinusoid_layout": "half_split", "scale_embedding": False, "decoder_layers": 1},
    # Marian's (`encdec import`): swish, a logits bias (random: folders), no <s>, the pad token starts the decoder
    "marian": {**MARIAN_SWITCHES, **MARIAN_IDS},
}
CONFIGS = {**{f"transformer-{name}": {**TEST_TRANSFORMER, **switches}
              for name, switches in TRANSFORMER_SWITCHES.items()},
           **{f"rnn-{name}": {**VARIANT_RNN, **variant} for name, variant in RNN_VARIANTS.items()}}
INT8_EXPORTS = ("transformer-post_ln_sinusoid_tied", "transformer-marian", "rnn-bahdanau-lstm",
                "rnn-luong_general-nofeed-gru")


def config_model(config: dict) -> tuple:
    """A random tiny model of ``config`` over the toy vocabulary (its own special ids where it names them), a logits
    bias drawn at random where it has one, and its tokenizer (without <s> where the model has none)."""
    tokenizer = digit_tokenizer(bos=config.get("bos_token_id", BOS) is not None)
    model = tiny_model({**TOY_IDS, **config}, vocab_size=len(tokenizer))
    return (random_logits_bias(model) if config.get("final_logits_bias") else model), tokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> a random tiny model folder of every configuration."""
    root = tmp_path_factory.mktemp("models")
    return {name: save_for_pipeline(*config_model(config), root / name) for name, config in CONFIGS.items()}


@pytest.fixture(scope="module")
def exports(folders, tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    return {name: export_onnx(folder, root / name) for name, folder in folders.items()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_variant_exports_in_the_layout_and_matches_torch(name, folders, exports) -> None:
    out = exports[name]
    layout = read_layout(out)
    assert {ENCODER_FILE, DECODER_FILE, MANIFEST, "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json"} <= {path.name for path in out.iterdir()}
    assert layout.weights == "float32" and layout.opset >= 17 and layout.check["max_abs_logit_diff"] <= 1e-4
    assert layout.source_model["path"] == str(folders[name].resolve())
    for graph in (layout.encoder, layout.decoder):
        model = onnx.load(out / graph.file)
        assert [node.name for node in model.graph.input] == graph.inputs
        assert [node.name for node in model.graph.output] == graph.outputs
        for value in (*model.graph.input, *model.graph.output):  # batch first everywhere, and dynamic
            assert value.type.tensor_type.shape.dim[0].dim_param == "batch", (graph.file, value.name)
        # no copy of a tensor at every step: a Concat of one input (the tracer's, onto an empty cache) is removed
        assert not [node.name for node in model.graph.node if node.op_type == "Concat" and len(node.input) == 1]
    for entry in layout.state:  # each state is a decoder input and output, starting empty or from the encoder
        assert entry.past in layout.decoder.inputs and entry.present in layout.decoder.outputs
    family = CONFIGS[name]["model_type"]
    if family == "transformer_seq2seq":
        assert {entry.init for entry in layout.state} == {"empty"} and layout.multi_token
    else:
        assert all(entry.init == f"init.{entry.name}" for entry in layout.state)
        attention = CONFIGS[name]["attention"]  # a step that feeds back takes one token a call
        assert layout.multi_token == (attention == "none" or attention.startswith("luong")
                                      and CONFIGS[name].get("input_feeding") is False)


@pytest.mark.parametrize("name", INT8_EXPORTS)
def test_int8_quantizes_the_matmuls_and_the_lstm(name, folders, tmp_path) -> None:
    out = export_onnx(folders[name], tmp_path / "int8", quantize="int8")
    layout = read_layout(out)
    assert layout.weights == "int8" and layout.check["max_abs_logit_diff"] <= layout.check["tolerance"]
    for file in (ENCODER_FILE, DECODER_FILE):
        graph = onnx.load(out / file).graph
        weights = {tensor.name for tensor in graph.initializer}
        ops = {node.op_type for node in graph.node}
        assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops, file
        # a product with a weight is quantized; those of two activations (attention's Q K^T, weights x V) are not
        assert not [node.name for node in graph.node if node.op_type == "MatMul" and weights & set(node.input)], file
        assert ("DynamicQuantizeLSTM" in ops) == ("lstm" in name), file  # GRU has no int8 kernel in ONNX Runtime


def corrupt(path, scale: float = 1.5, name: str | None = None) -> None:
    """The initializer ``name`` (default: the largest weight) of the graph ``path``, scaled."""
    model = onnx.load(path)
    largest = max(model.graph.initializer, key=lambda tensor: (tensor.name == name, numpy_helper.to_array(tensor).size))
    largest.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(largest) * scale, largest.name))
    onnx.save(model, path)


@pytest.mark.parametrize("name", ["transformer-post_ln_sinusoid_tied", "rnn-luong_concat-lstm"])
@pytest.mark.parametrize("graph", [ENCODER_FILE, DECODER_FILE])
def test_the_self_check_names_a_corrupted_graph(name, graph, tmp_path) -> None:
    config = CONFIGS[name]
    model = tiny_model(config, **TOY_IDS)
    if config["model_type"] == "transformer_seq2seq":
        model.set_attn_implementation("eager")
    layout = write_graphs(model, tmp_path)
    check_export(model, tmp_path, layout, 1e-4)  # as exported: it passes
    corrupt(tmp_path / graph)
    with pytest.raises(ExportCheckFailed, match=rf"^The ONNX export does not compute what the model computes: {graph} "
                                                r"\(float32\) gives .* away from torch's \(tolerance 0.0001\)"):
        check_export(model, tmp_path, layout, 1e-4)


def bias_initializer(path, bias) -> str:
    """The name of the one initializer of the graph ``path`` shaped as ``bias``, after checking it holds ``bias`` and
    is added to something (the projection's output)."""
    graph = onnx.load(path).graph
    found = [tensor for tensor in graph.initializer if tuple(tensor.dims) == bias.shape]
    assert len(found) == 1 and (numpy_helper.to_array(found[0]) == bias).all()
    assert any(node.op_type == "Add" and found[0].name in node.input for node in graph.node)
    return found[0].name


def test_the_logits_bias_is_in_the_decoder_graph_and_its_loss_is_caught(folders, exports, tmp_path) -> None:
    """Marian's switches: the logits bias is the decoder graph's, as stored (float32 in the int8 graph too, whose
    7-bit weights cannot overflow 16-bit sums: swish's negative outputs are quantized to uint8 like any activation),
    swish is x * sigmoid(x); the self-check refuses a graph that drops the bias."""
    model = load_model_and_tokenizer(folders["transformer-marian"])[0]
    bias = model.final_logits_bias.numpy()  # (1, V), random
    int8 = export_onnx(folders["transformer-marian"], tmp_path / "int8", quantize="int8")
    for out in (exports["transformer-marian"], int8):
        bias_initializer(out / DECODER_FILE, bias)
        assert "Sigmoid" in {node.op_type for node in onnx.load(out / ENCODER_FILE).graph.node}
    assert not saturating_weights(int8 / ENCODER_FILE) and not saturating_weights(int8 / DECODER_FILE)
    model.set_attn_implementation("eager")
    layout = write_graphs(model, tmp_path)
    corrupt(tmp_path / DECODER_FILE, scale=0.0, name=bias_initializer(tmp_path / DECODER_FILE, bias))  # bias gone
    with pytest.raises(ExportCheckFailed, match=f"{DECODER_FILE} \\(float32\\) gives logits up to"):
        check_export(model, tmp_path, layout, 1e-4)


def test_a_failed_check_writes_nothing(folders, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(onnx_export, "TOLERANCE", 0.0)  # nothing passes
    out = tmp_path / "out"
    with pytest.raises(ExportCheckFailed, match="nothing was written"):
        export_onnx(folders["rnn-bahdanau-gru"], out)
    assert list(tmp_path.iterdir()) == []  # no folder, no staging folder left


def test_bad_inputs_are_refused_in_one_line(folders, exports, tmp_path, capsys) -> None:
    model = folders["transformer-post_ln_sinusoid_tied"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputFileError, match="is not a model folder"):
        export_onnx(empty, tmp_path / "a")
    with pytest.raises(InputFileError, match="is an ONNX export .*`--engine onnxruntime`"):
        export_onnx(exports["transformer-post_ln_sinusoid_tied"], tmp_path / "b")
    with pytest.raises(EncdecError, match=r"`quantize` must be one of \['float32', 'int8'\] for the ONNX export"):
        export_onnx(model, tmp_path / "c", quantize="bfloat16")
    existing = shutil.copytree(exports["rnn-none-lstm"], tmp_path / "existing")
    before = {path.name: path.read_bytes() for path in existing.iterdir()}
    with pytest.raises(OverwriteError, match="already exists and is not empty; pass --overwrite"):
        export_onnx(model, existing)
    assert {path.name: path.read_bytes() for path in existing.iterdir()} == before  # nothing overwritten
    with pytest.raises(OverwriteError, match="destroy the input"):
        export_onnx(model, model / "onnx", overwrite=True)
    commands = {"ensemble": ["--model", str(model), "--model", str(model)],
                "option": ["--model", str(model), "--quantize", "float16"]}
    for args in commands.values():
        assert main(["export", "--format", "onnx", "--output", str(tmp_path / "d"), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("encdec export: error:")
    assert not (tmp_path / "d").exists()


def test_the_cli_exports_int8_beside_float32(folders, tmp_path, capsys) -> None:
    """`--quantize` and `--quantization` are one flag, as for CTranslate2."""
    model = folders["rnn-luong_dot-gru"]
    assert main(["export", "--model", str(model), "--format", "onnx", "--output", str(tmp_path / "q"),
                 "--quantize", "int8"]) == 0
    assert main(["export", "--model", str(model), "--format", "onnx", "--output", str(tmp_path / "f"),
                 "--quantization", "float32"]) == 0
    assert "`encdec translate --engine onnxruntime --model" in capsys.readouterr().out
    assert (read_layout(tmp_path / "q").weights, read_layout(tmp_path / "f").weights) == ("int8", "float32")


@pytest.mark.parametrize("config", [{**TEST_TRANSFORMER, "dropout": 0.3}, {**VARIANT_RNN, "dropout": 0.3}],
                         ids=["transformer", "rnn"])
def test_a_model_trained_with_dropout_exports_as_it_evaluates(config, tmp_path) -> None:
    """Every trained model has dropout: the export traces and checks it in eval mode, whatever the exporter does to
    the modules' training flags between the two graphs (it once put the model back into training mode)."""
    tokenizer = digit_tokenizer()
    folder = save_for_pipeline(tiny_model(config, **{**TOY_IDS, "vocab_size": len(tokenizer)}), tokenizer,
                               tmp_path / "model")
    layout = read_layout(export_onnx(folder, tmp_path / "onnx"))
    assert layout.check["max_abs_logit_diff"] <= 1e-4
