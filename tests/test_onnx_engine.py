"""``--engine onnxruntime``: transformers' ``generate()`` over the ONNX Runtime sessions of an export decodes as the
torch model does, through the one decoding path (``translate``, n-best lists and scores, ``evaluate``, corpus
translation, ``serve``): in float32 the same tokens for greedy and beam search and the same scores within 1e-4; the
int8 copy agrees on most outputs (the measure is stated below). A broken folder is refused in one line naming the
file.

The models are trained for a second on the toy task (reverse the digits): their outputs depend on the input and end
with EOS at varied steps, so beams really compete."""

from __future__ import annotations

import json
import random
import shutil

import onnx
import pytest
import torch

from encdec.backends import BACKENDS
from encdec.errors import EncdecError, InputFileError
from encdec.folders import save_for_pipeline
from encdec.inference import load_engine, translate, translate_detailed, translate_lines, translate_n_best
from encdec.inference.engines.onnx_layout import DECODER_FILE, ENCODER_FILE, MANIFEST
from encdec.inference.engines.onnxruntime_engine import OnnxRuntimeEngine
from encdec.serve.server import load_models
from encdec.ship.onnx_export import export_onnx
from encdec_cli import main
from toy import digit_tokenizer, trained_marian_like, trained_rnn_variant

# one model a family, and an RNN whose decoder graph takes one token a call (Bahdanau) beside one that takes many, and
# a Transformer with Marian's switches (`encdec import`: swish, a logits bias, no <s>, Marian's generation rules)
MODELS = ("transformer", "bahdanau-lstm", "luong_general-nofeed-gru", "marian")
INT8_AGREEMENT = 0.8  # int8: the share of greedy outputs equal to torch's float32 ones, on 60 sources (measured on 200
# sources: 95.5-98.5% of greedy outputs and 98-99% of tokens equal, 94-96.5% of beam-4 outputs, over these three models)


@pytest.fixture(scope="module")
def folders(trained_tiny_transformer, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    models = {"transformer": trained_tiny_transformer, "marian": trained_marian_like(),
              **{name: trained_rnn_variant(name) for name in MODELS[1:3]}}
    return {name: save_for_pipeline(model, digit_tokenizer(bos=name != "marian"), root / name)
            for name, model in models.items()}


@pytest.fixture(scope="module")
def exports(folders, tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    return {(name, weights): export_onnx(folder, root / f"{name}-{weights}", quantize=weights)
            for name, folder in folders.items() for weights in ("float32", "int8")}


def sources(count: int, seed: int = 0) -> list[str]:
    generator = random.Random(seed)
    return [" ".join(str(generator.randrange(10)) for _ in range(generator.randint(2, 6))) for _ in range(count)]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("num_beams", [1, 4])
def test_float32_tokens_equal_torch_s(name, num_beams, folders, exports) -> None:
    torch_engine, tokenizer = load_engine(folders[name])
    onnx_engine, onnx_tokenizer = load_engine(exports[name, "float32"], "onnxruntime")
    texts = sources(40)
    expected = translate(torch_engine, tokenizer, texts, num_beams=num_beams, max_new_tokens=10)
    assert translate(onnx_engine, onnx_tokenizer, texts, num_beams=num_beams, max_new_tokens=10) == expected
    assert len(set(expected)) > 10  # the outputs depend on the input


@pytest.mark.parametrize("num_beams", [1, 4])
def test_no_repeat_ngram_size_goes_through_generate_as_torch_s(num_beams, folders, exports) -> None:
    """The ONNX Runtime engine decodes with generate() too, its logits processors included."""
    torch_engine, tokenizer = load_engine(folders["transformer"])
    onnx_engine, onnx_tokenizer = load_engine(exports["transformer", "float32"], "onnxruntime")
    texts, asked = sources(40), {"num_beams": num_beams, "max_new_tokens": 10, "no_repeat_ngram_size": 2}
    expected = translate(torch_engine, tokenizer, texts, **asked)
    assert expected != translate(torch_engine, tokenizer, texts, num_beams=num_beams, max_new_tokens=10)
    assert translate(onnx_engine, onnx_tokenizer, texts, **asked) == expected


@pytest.mark.parametrize("name", MODELS)
def test_n_best_lists_and_scores_equal_torch_s(name, folders, exports) -> None:
    """``num_return_sequences`` and ``output_scores``: generate()'s own sequences and scores, and the one decoding
    path's n-best lists with each hypothesis's teacher-forced log P (the decoder over a whole prefix)."""
    torch_engine, tokenizer = load_engine(folders[name])
    onnx_engine, _ = load_engine(exports[name, "float32"], "onnxruntime")
    texts = sources(12, seed=1)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    options = {"num_beams": 4, "num_return_sequences": 3, "max_new_tokens": 10, "output_scores": True,
               "return_dict_in_generate": True}
    with torch.inference_mode():
        expected = torch_engine.model.generate(**batch, **options)
        got = onnx_engine.model.generate(**batch, **options)
    assert torch.equal(expected.sequences, got.sequences)
    assert torch.allclose(expected.sequences_scores, got.sequences_scores, atol=1e-4)
    detailed = [translate_detailed(engine, tokenizer, texts, n_best=3, scores=True, num_beams=4, max_new_tokens=10)
                for engine in (torch_engine, onnx_engine)]
    pairs = [(a, b) for mine, theirs in zip(*detailed, strict=True) for a, b in zip(mine, theirs, strict=True)]
    assert len(pairs) >= 24 and all(a.text == b.text for a, b in pairs)  # fewer: a text is listed once
    assert max(abs(a.score - b.score) for a, b in pairs) < 1e-4
    assert translate_n_best(onnx_engine, tokenizer, texts, 2, num_beams=4, max_new_tokens=10) == \
        translate_n_best(torch_engine, tokenizer, texts, 2, num_beams=4, max_new_tokens=10)


@pytest.mark.parametrize("name", MODELS)
def test_int8_agrees_on_most_outputs(name, folders, exports) -> None:
    """The measure: the share of 60 greedy outputs equal to torch's float32 outputs, at least ``INT8_AGREEMENT``."""
    torch_engine, tokenizer = load_engine(folders[name])
    int8, _ = load_engine(exports[name, "int8"], "onnxruntime")
    assert int8.precision == "int8_float32"
    texts = sources(60, seed=2)
    expected = translate(torch_engine, tokenizer, texts, max_new_tokens=10)
    got = translate(int8, tokenizer, texts, max_new_tokens=10)
    assert sum(a == b for a, b in zip(expected, got, strict=True)) / len(texts) >= INT8_AGREEMENT


def test_the_command_line_translates_evaluates_and_serves(folders, exports, tmp_path, capsys) -> None:
    """translate (corpus translation of a file), evaluate and serve with --engine onnxruntime answer as torch."""
    name = "bahdanau-lstm"
    export, texts = exports[name, "float32"], sources(20, seed=3)
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("\n".join(texts) + "\n")
    expected = translate_lines(folders[name], texts, num_beams=3)
    assert translate_lines(export, texts, engine="onnxruntime", num_beams=3) == expected
    assert main(["translate", "--engine", "onnxruntime", "--model", str(export), "--input", str(source), "--output",
                 str(output), "--num-beams", "3", "--quiet"]) == 0
    assert output.read_text().splitlines() == expected
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(" ".join(reversed(text.split())) for text in texts) + "\n")
    results = tmp_path / "results.json"
    # (the Transformer: the digit tokenizer has no length limit, and evaluate cuts sources to the model's positions)
    assert main(["evaluate", "--engine", "onnxruntime", "--model", str(exports["transformer", "float32"]),
                 "--source-file", str(source),
                 "--reference-file", str(reference), "--output", str(results)]) == 0
    assert json.loads(results.read_text())["engine"] == "onnxruntime"
    service = load_models([f"de-en={export},engine=onnxruntime"]).pick("de", "en").service
    torch_service = load_models([f"de-en={folders[name]}"]).pick("de", "en").service
    assert (service.info()["engine"], service.info()["alignments"]) == ("onnxruntime", False)
    asked = [(served, served.jobs(texts[:6], n_best=2, return_scores=True, num_beams=3))
             for served in (service, torch_service)]  # each text's translation, then its n-best list
    answers = [served.per_text(jobs, [served.decode([job])[0] for job in jobs]) for served, jobs in asked]
    for (_, got), (_, expected) in zip(*answers, strict=True):  # the same texts and n-best lists, the same scores
        assert [h["text"] for h in got] == [h["text"] for h in expected]
        assert [h["score"] for h in got] == pytest.approx([h["score"] for h in expected], abs=1e-4)


def test_refusals_say_what_to_do(folders, exports) -> None:
    engine, tokenizer = load_engine(exports["transformer", "float32"], "onnxruntime")
    with pytest.raises(EncdecError, match="^Alignments come from the model's attention, which the onnxruntime engine "
                                          "does not return; use --engine torch with --alignments.$"):
        translate_detailed(engine, tokenizer, ["3 1"], alignments=True)
    with pytest.raises(EncdecError, match="holds float32 graphs; .* `encdec export --format onnx --quantize int8`"):
        load_engine(exports["transformer", "float32"], "onnxruntime", quantize="int8")
    assert load_engine(exports["transformer", "int8"], "onnxruntime", quantize="int8")[0].precision == "int8_float32"
    with pytest.raises(InputFileError, match="is a torch model folder, not an ONNX export: export it first with "
                                             "`encdec export --model .* --format onnx"):
        load_engine(folders["transformer"], "onnxruntime")
    with pytest.raises(EncdecError, match="An ensemble .* --engine onnxruntime takes one model"):
        load_engine([exports["transformer", "float32"]] * 2, "onnxruntime")
    assert BACKENDS["onnxruntime"].install == "pip install 'encdec[onnx]'"


def broken_copy(exports, tmp_path, name: str = "transformer"):
    return shutil.copytree(exports[name, "float32"], tmp_path / "broken")


def test_a_missing_graph_is_named(exports, tmp_path) -> None:
    folder = broken_copy(exports, tmp_path)
    (folder / DECODER_FILE).unlink()
    with pytest.raises(InputFileError, match=f"{DECODER_FILE} \\(the decoder graph\\) is missing; export the model"):
        load_engine(folder, "onnxruntime")


def test_a_manifest_of_another_version_is_named(exports, tmp_path) -> None:
    folder = broken_copy(exports, tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "version": 2}))
    with pytest.raises(InputFileError, match=f"{MANIFEST} is version 2 of the encdec-onnx layout; this encdec reads "
                                             "version 1"):
        OnnxRuntimeEngine(folder)


def test_a_graph_of_another_model_is_named(exports, tmp_path) -> None:
    folder = broken_copy(exports, tmp_path)
    shutil.copy(exports["luong_general-nofeed-gru", "float32"] / ENCODER_FILE, folder / ENCODER_FILE)
    with pytest.raises(InputFileError, match=f"{ENCODER_FILE} is not the graph that {MANIFEST} describes \\(it comes "
                                             "from another export"):
        OnnxRuntimeEngine(folder)
    other = broken_copy(exports, tmp_path / "2", "bahdanau-lstm")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 1}))
    with pytest.raises(InputFileError, match="describes a rnn_seq2seq model of 23 tokens, but config.json a "
                                             "rnn_seq2seq model of 24"):
        OnnxRuntimeEngine(other)


def test_an_opset_onnx_runtime_refuses_is_named(exports, tmp_path) -> None:
    folder = broken_copy(exports, tmp_path)
    graph = onnx.load(folder / DECODER_FILE)
    graph.opset_import[0].version = 99
    onnx.save(graph, folder / DECODER_FILE)
    with pytest.raises(InputFileError) as refused:
        OnnxRuntimeEngine(folder)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("ONNX Runtime ") and f"cannot load {folder / DECODER_FILE}" in \
        message
