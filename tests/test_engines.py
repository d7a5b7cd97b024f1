"""Fast inference: the CTranslate2 export of the Transformer (every configuration switch) decodes as generate()
does, int8 and bfloat16 keep the models' accuracy, and every refusal says what to do.

The models are trained here, for a few hundred steps on the built-in date task (about 10 s each): trained models
end their outputs with EOS at varied steps and their beams really compete, which random weights do not give.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized import dynamic as dynamic_int8

from encdec.errors import EncdecError, OverwriteError
from encdec.folders import save_for_pipeline
from encdec.inference import (
    engines,
    load_engine,
    load_model_and_tokenizer,
    translate,
    translate_detailed,
    translate_lines,
    translate_n_best,
)
from encdec.inference.engines import CPU_CLASSES, INT8_MEASURED, TorchEngine, int8_note
from encdec.inference.engines.ctranslate2_engine import CTranslate2Engine, CTranslate2Missing
from encdec.inference.evaluation import evaluate_model
from encdec.ship.ctranslate2_export import EncdecTransformerConverter, export_ctranslate2, vocabulary_tokens
from encdec_cli import main
from tiny_model_folders import DATE_TRANSFORMER as TRANSFORMER
from tiny_model_folders import build_model_folders, date_data, train_on_dates
from toy import FIRST_DIGIT, PAD, digit_tokenizer, right_pad, trained_marian_like

# every switch of TransformerSeq2SeqConfig takes each of its values in one of these
SWITCHES = {
    "paper": {},  # post-LN, interleaved sinusoid, sqrt(d) scaling, tied, relu, eps 1e-5
    "pre_ln_learned_gelu": {"normalize_before": True, "position_embedding_type": "learned",
                            "activation_function": "gelu"},
    "half_split_unscaled_untied": {"sinusoid_layout": "half_split", "scale_embedding": False,
                                   "tie_word_embeddings": False, "layer_norm_eps": 1e-6, "encoder_layers": 1,
                                   "decoder_attention_heads": 2, "decoder_ffn_dim": 96},
}


@pytest.fixture(scope="module")
def dates():
    """A tokenizer, 4,000 training pairs and 200 held-out ones (none of them in training)."""
    return date_data()


@pytest.fixture(scope="module")
def folders(dates, date_models, tmp_path_factory):
    """name -> model folder: a Transformer per SWITCHES entry (600 steps) and a Bahdanau LSTM (600 steps); the paper's
    Transformer and the LSTM are the session's (conftest's ``date_models``, which test_serve.py serves)."""
    root = tmp_path_factory.mktemp("engines")
    made = {"paper": date_models["transformer"], "rnn": date_models["rnn"]}
    for name, switches in SWITCHES.items():
        if name not in made:
            model = train_on_dates({**TRANSFORMER, **switches}, dates, steps=600, lr=3e-3)
            made[name] = save_for_pipeline(model, dates[0], root / name)
    return made


@pytest.fixture(scope="module")
def exports(folders, tmp_path_factory):
    root = tmp_path_factory.mktemp("ct2")
    return {name: export_ctranslate2(folders[name], root / name) for name in SWITCHES}


def exact_match(outputs: list[str], pairs) -> float:
    return sum(out == target for out, (_, target) in zip(outputs, pairs, strict=True)) / len(pairs)


def same_share(a: list[str], b: list[str]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


# the layers quantize_int8 replaces, and torch's dynamic int8 module that takes each one's place
INT8_LAYERS = {nn.Linear: dynamic_int8.Linear, nn.LSTM: dynamic_int8.LSTM, nn.GRU: dynamic_int8.GRU}
# what CTranslate2 reports for int8 on a CPU: int8 weights and matrix products, the other operations in float32
CT2_INT8 = ("int8", "int8_float32")


def assert_int8(quantized: nn.Module, original: nn.Module) -> None:
    """Every linear and recurrent layer of ``original`` is, at the same place in ``quantized``, torch's dynamic
    int8 module (linear weights stored as qint8); none is left in float."""
    layers = {name: type(module) for name, module in original.named_modules() if type(module) in INT8_LAYERS}
    assert layers, "the float model has no layer to quantize"
    found = dict(quantized.named_modules())
    for name, kind in layers.items():
        assert type(found[name]) is INT8_LAYERS[kind], (name, type(found[name]))
        if kind is nn.Linear:
            assert found[name].weight().dtype == torch.qint8, name
    assert not [name for name, module in quantized.named_modules() if type(module) in INT8_LAYERS]


def assert_ct2_computes(engine: CTranslate2Engine, *compute_types: str) -> None:
    assert engine.translator.compute_type in compute_types, engine.translator.compute_type


def assert_bfloat16(model: nn.Module) -> None:
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}


@pytest.fixture
def built_engines(monkeypatch) -> list:
    """The engines created while the test runs (by the command line or ``evaluate_model``), to look inside them:
    each engine class's ``__init__`` also records the engine it made."""
    engines = []
    for cls in (TorchEngine, CTranslate2Engine):
        def init(self, *args, _original=cls.__init__, **kwargs) -> None:
            _original(self, *args, **kwargs)
            engines.append(self)
        monkeypatch.setattr(cls, "__init__", init)
    return engines


@pytest.mark.parametrize("name", list(SWITCHES))
@pytest.mark.parametrize("num_beams", [1, 5])
def test_ctranslate2_decodes_as_generate(name, num_beams, folders, exports, dates) -> None:
    sources = [source for source, _ in dates[2]]
    torch_engine, tokenizer = load_engine(folders[name])
    ct2_engine, ct2_tokenizer = load_engine(exports[name], "ctranslate2")
    expected = translate(torch_engine, tokenizer, sources, num_beams=num_beams, max_new_tokens=16)
    got = translate(ct2_engine, ct2_tokenizer, sources, num_beams=num_beams, max_new_tokens=16)
    assert exact_match(expected, dates[2]) >= 0.9  # a trained model, whose beams compete for real
    assert same_share(expected, got) >= 0.99


@pytest.mark.parametrize("name", list(SWITCHES))
def test_ctranslate2_scores_match_teacher_forced_log_probs(name, folders, exports, dates) -> None:
    """score_batch gives each target token's log-probability (it adds the </s>), as the torch model's log-softmax."""
    torch_engine, tokenizer = load_engine(folders[name])
    model = torch_engine.model
    ct2_engine = CTranslate2Engine(exports[name])
    pairs = dates[2][:32]
    for source, target in pairs:
        source_ids = tokenizer(source)["input_ids"]
        target_ids = tokenizer(target)["input_ids"]  # ends with </s>
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([source_ids]), labels=torch.tensor([target_ids])).logits[0]
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(target_ids)[:, None])[:, 0]
        scored = ct2_engine.translator.score_batch([tokenizer.convert_ids_to_tokens(source_ids)],
                                                   [tokenizer.convert_ids_to_tokens(target_ids[:-1])])[0]
        assert torch.allclose(torch.tensor(scored.log_probs), expected, atol=1e-4)


def test_export_writes_every_switch_and_the_special_tokens(folders, exports) -> None:
    config = json.loads((Path(exports["paper"]) / "config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["decoder_start_token"]) == ("<s>", "</s>", "<s>")
    assert config["layer_norm_epsilon"] == 1e-5
    info = json.loads((Path(exports["half_split_unscaled_untied"]) / "encdec_export.json").read_text())
    assert info["model_config"]["layer_norm_eps"] == 1e-6 and info["quantization"] == "float32"
    assert (Path(exports["paper"]) / "tokenizer.json").is_file()
    assert (Path(exports["paper"]) / "generation_config.json").is_file()


def test_vocabulary_is_padded_to_the_model_size(dates) -> None:
    tokenizer = dates[0]
    tokens = vocabulary_tokens(tokenizer, len(tokenizer) + 3)
    assert tokens[:len(tokenizer)] == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert len(set(tokens)) == len(tokenizer) + 3
    with pytest.raises(EncdecError, match="`vocab_size` is 10"):
        vocabulary_tokens(tokenizer, 10)


@pytest.mark.parametrize("family", ["paper", "rnn"])
@pytest.mark.parametrize("precision", [{"quantize": "int8"}, {"dtype": "bfloat16"}])
def test_torch_int8_and_bfloat16_keep_exact_match(family, precision, folders, dates) -> None:
    """The engine computes in the precision asked for (torch's dynamic int8 module in place of every linear and
    recurrent layer; every parameter in bfloat16) and keeps the float model's accuracy."""
    sources = [source for source, _ in dates[2]]
    float_engine, tokenizer = load_engine(folders[family])
    low_engine, _ = load_engine(folders[family], **precision)
    if "quantize" in precision:
        assert_int8(low_engine.model, float_engine.model)
    else:
        assert_bfloat16(low_engine.model)
    reference = exact_match(translate(float_engine, tokenizer, sources, max_new_tokens=16, num_beams=1), dates[2])
    low = exact_match(translate(low_engine, tokenizer, sources, max_new_tokens=16, num_beams=1), dates[2])
    assert reference >= 0.85
    assert low >= reference - 0.01


def test_int8_engines_keep_exact_match(folders, exports, dates, tmp_path) -> None:
    """CTranslate2 computes in int8 when asked (``quantize="int8"``), on float32 or int8 weights, and an int8 export
    stores int8 weights (a quarter of the float32 bytes, with the float32 layer norms and biases: under half); each
    keeps the float model's accuracy."""
    sources = [source for source, _ in dates[2]]
    float_engine, tokenizer = load_engine(exports["paper"], "ctranslate2")
    assert_ct2_computes(float_engine, "float32")
    reference = exact_match(translate(float_engine, tokenizer, sources, num_beams=5), dates[2])
    int8_compute, _ = load_engine(exports["paper"], "ctranslate2", quantize="int8")
    assert_ct2_computes(int8_compute, *CT2_INT8)
    int8_weights = export_ctranslate2(folders["paper"], tmp_path / "int8", quantization="int8")
    assert json.loads((int8_weights / "encdec_export.json").read_text())["quantization"] == "int8"
    assert (int8_weights / "model.bin").stat().st_size < 0.5 * (Path(exports["paper"]) / "model.bin").stat().st_size
    stored_int8, _ = load_engine(int8_weights, "ctranslate2", quantize="int8")
    assert_ct2_computes(stored_int8, *CT2_INT8)
    # without a flag the engine computes in the type the export stored (CTranslate2's "default"): int8 here
    stored_default, _ = load_engine(int8_weights, "ctranslate2")
    assert_ct2_computes(stored_default, *CT2_INT8)
    assert stored_default.precision == stored_default.translator.compute_type
    stored = translate_lines(int8_weights, sources, engine="ctranslate2", num_beams=5)
    assert exact_match(translate(int8_compute, tokenizer, sources, num_beams=5), dates[2]) >= reference - 0.01
    assert exact_match(translate(stored_int8, tokenizer, sources, num_beams=5), dates[2]) >= reference - 0.01
    assert exact_match(stored, dates[2]) >= reference - 0.01


def test_quantized_torch_engine_leaves_the_model_alone(folders) -> None:
    model, _ = load_engine(folders["rnn"])
    before = {k: v.clone() for k, v in model.model.state_dict().items()}
    layers = {name: type(module) for name, module in model.model.named_modules()}
    int8 = TorchEngine(model.model, quantize="int8")
    bf16 = TorchEngine(model.model, dtype="bfloat16")
    assert_int8(int8.model, model.model)
    assert_bfloat16(bf16.model)
    assert {name: type(module) for name, module in model.model.named_modules()} == layers  # still float layers
    after = model.model.state_dict()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == before[k].dtype for k in before)


def test_quantize_int8_shows_no_deprecation_notice(folders, recwarn) -> None:
    engine, _ = load_engine(folders["rnn"], quantize="int8")  # torch's quantize_dynamic ran, and said nothing
    assert_int8(engine.model, load_model_and_tokenizer(folders["rnn"])[0])
    assert not [w for w in recwarn if "deprecated" in str(w.message)]


def test_sampling_options_map_to_ctranslate2(exports, dates) -> None:
    sources = [source for source, _ in dates[2][:20]]
    engine, tokenizer = load_engine(exports["paper"], "ctranslate2")
    greedy = translate(engine, tokenizer, sources, num_beams=1)
    assert translate(engine, tokenizer, sources, num_beams=1, do_sample=True, top_k=1) == greedy
    options = engine.options({"do_sample": True, "top_p": 0.9, "temperature": 0.7, "num_beams": 1}, 20)
    assert (options["sampling_topp"], options["sampling_temperature"], options["beam_size"]) == (0.9, 0.7, 1)
    assert options["sampling_topk"] == 50  # generate()'s default top_k
    assert options["max_decoding_length"] == 20


@pytest.mark.parametrize("num_beams", [1, 5])
def test_no_repeat_ngram_size_maps_to_ctranslate2(num_beams, folders, exports, dates) -> None:
    """CTranslate2's translate_batch takes `no_repeat_ngram_size` under that name: greedy outputs as generate()'s.
    Beam search agrees on most (96 of these 100 at 5 beams, where it agrees on 99% without the option): once a ban
    applies, CTranslate2's beam search keeps other beams than generate()'s now and then (the cause is not pinned
    down; greedy search, which only takes the best allowed token, agrees on every output)."""
    sources = [source for source, _ in dates[2][:100]]
    torch_engine, tokenizer = load_engine(folders["paper"])
    ct2_engine, ct2_tokenizer = load_engine(exports["paper"], "ctranslate2")
    asked = {"num_beams": num_beams, "max_new_tokens": 16, "no_repeat_ngram_size": 1}  # a date holds "-" twice
    expected = translate(torch_engine, tokenizer, sources, **asked)
    assert expected != translate(torch_engine, tokenizer, sources, num_beams=num_beams, max_new_tokens=16)
    got = translate(ct2_engine, ct2_tokenizer, sources, **asked)
    assert same_share(expected, got) >= (0.99 if num_beams == 1 else 0.9)
    assert ct2_engine.options({"no_repeat_ngram_size": 2}, 10)["no_repeat_ngram_size"] == 2


def test_ctranslate2_refuses_what_it_lacks(exports) -> None:
    engine, _ = load_engine(exports["paper"], "ctranslate2")
    with pytest.raises(EncdecError, match="no option 'num_beam_groups'"):
        engine.options({"num_beam_groups": 2}, 10)
    with pytest.raises(EncdecError, match="samples with one beam only"):
        engine.options({"do_sample": True, "num_beams": 4}, 10)
    assert engine.options({"num_beams": 5}, 10)["patience"] == 2.0  # generate()'s default early_stopping=False
    assert engine.options({"num_beams": 5, "early_stopping": True}, 10)["patience"] == 1.0
    with pytest.raises(EncdecError, match="`early_stopping` True or False, not 'never'"):
        engine.options({"early_stopping": "never"}, 10)
    tokenizer = engine.tokenizer
    with pytest.raises(EncdecError, match="exceeds the 64 positions exported .* truncation"):
        translate(engine, tokenizer, [" ".join(["March 3"] * 60)])
    with pytest.raises(EncdecError, match="budget of 64 new tokens .* at most 63"):
        translate(engine, tokenizer, ["March 3, 2001"], max_new_tokens=64)
    assert translate(engine, tokenizer, [" ".join(["March 3"] * 60)], truncate=True)  # cut to 64: it translates


def test_refusals_name_the_problem(folders, exports, tmp_path, monkeypatch) -> None:
    with pytest.raises(EncdecError, match="no recurrent .* --quantize int8"):
        export_ctranslate2(folders["rnn"], tmp_path / "rnn")
    assert not (tmp_path / "rnn").exists()
    with pytest.raises(EncdecError, match="`quantization` must be one of"):
        export_ctranslate2(folders["paper"], tmp_path / "x", quantization="int4")
    with pytest.raises(OverwriteError, match=f"export folder {re.escape(str(exports['paper']))} already exists and is "
                                             "not empty; pass --overwrite"):
        export_ctranslate2(folders["paper"], exports["paper"])
    with pytest.raises(EncdecError, match="is a torch model folder, not a CTranslate2 export: export it first with"):
        load_engine(folders["paper"], "ctranslate2")
    with pytest.raises(EncdecError, match="`engine` must be one of"):
        load_engine(folders["paper"], "onnx")
    with pytest.raises(EncdecError, match="Choose `quantize`='int8' or `dtype`='bfloat16', not both"):
        load_engine(folders["paper"], quantize="int8", dtype="bfloat16")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed: importing it raises ImportError
    with pytest.raises(CTranslate2Missing, match=r"pip install 'encdec\[ct2\]'"):
        load_engine(exports["paper"], "ctranslate2")


def test_unrepresentable_switch_is_named(folders, tmp_path) -> None:
    model, tokenizer = load_model_and_tokenizer(folders["paper"])
    model.config.activation_function = "tanh"  # past the config's own check, as a hand-edited model could be
    with pytest.raises(EncdecError, match="cannot represent `activation_function`='tanh'; it supports \\['gelu', "
                                          "'relu', 'silu', 'swish'\\]"):
        EncdecTransformerConverter(model, tokenizer).convert(str(tmp_path / "tanh"))
    assert not (tmp_path / "tanh").exists()


# -- a model with Marian's switches (`encdec import`) -----------------------------------------------------------------

@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> tuple[Path, Path]:
    """toy.py's ``trained_marian_like`` model (swish, a random logits bias, the half-split table, no <s>: the pad token
    starts the decoder; Marian's generation rules) and its CTranslate2 export."""
    root = tmp_path_factory.mktemp("marian")
    folder = save_for_pipeline(trained_marian_like(), digit_tokenizer(bos=False), root / "model")
    return folder, export_ctranslate2(folder, root / "ct2")


def digit_batch(count: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``count`` right-padded sources of 2-6 random digits."""
    generator = random.Random(seed)
    rows = [[FIRST_DIGIT + generator.randrange(10) for _ in range(generator.randint(2, 6))] for _ in range(count)]
    return {"input_ids": right_pad(rows), "attention_mask": right_pad([[1] * len(row) for row in rows], 0)}


def until_eos(row: list[int], eos: int) -> list[int]:
    """An output up to its first </s> (after the start token), without generate()'s padding."""
    return row[: row.index(eos, 1) + 1] if eos in row[1:] else row


@pytest.mark.parametrize("num_beams", [1, 4])
def test_ctranslate2_decodes_marian_s_switches_as_generate(num_beams, marian) -> None:
    """The ids of generate() from the pad token, with the model's generation rules (the pad token never generated;
    </s> forced at the end of a full budget: a budget of 3 cuts most outputs), for greedy and beam search."""
    torch_engine, _ = load_engine(marian[0])
    ct2_engine, _ = load_engine(marian[1], "ctranslate2")
    batch, eos = digit_batch(100), torch_engine.config.eos_token_id
    for budget in (3, 10):
        expected = [until_eos(row, eos) for row in torch_engine.generate(**batch, budget=budget,
                                                                          settings={"num_beams": num_beams})]
        got = ct2_engine.generate(**batch, budget=budget, settings={"num_beams": num_beams})
        assert all(row[0] == PAD and row[-1] == eos for row in got)
        assert same_share(expected, got) >= 0.99
    assert len({tuple(row) for row in expected}) > 50  # the outputs depend on the input
    assert json.loads((marian[1] / "config.json").read_text())["decoder_start_token"] == "<pad>"


def test_ctranslate2_scores_marian_s_switches_as_torch(marian) -> None:
    """Teacher-forced log-probabilities within 1e-4: the logits bias (a random one, about 1 per token) is the
    projection's bias, swish the FFN's activation."""
    torch_engine, tokenizer = load_engine(marian[0])
    ct2_engine = CTranslate2Engine(marian[1])
    for row, mask in zip(*digit_batch(16, seed=1).values(), strict=True):
        source = row[mask.bool()].tolist()
        target = [*reversed(source), torch_engine.config.eos_token_id]
        expected, _ = torch_engine.teacher_forced(source, target)
        got, _ = ct2_engine.teacher_forced(source, target)
        assert torch.allclose(torch.tensor(got), torch.tensor(expected), atol=1e-4)


def test_ctranslate2_int8_of_marian_s_switches(marian, tmp_path) -> None:
    """An int8 export computes in int8 (the logits bias stays float32) and agrees with the float model on most
    outputs (measured: 94-99% of greedy outputs over three sets of 100 sources)."""
    int8 = export_ctranslate2(marian[0], tmp_path / "int8", quantization="int8")
    engine, _ = load_engine(int8, "ctranslate2")
    assert_ct2_computes(engine, *CT2_INT8)
    torch_engine, _ = load_engine(marian[0])
    batch, eos = digit_batch(100, seed=2), torch_engine.config.eos_token_id
    expected = [until_eos(row, eos) for row in torch_engine.generate(**batch, budget=10, settings={})]
    assert same_share(expected, engine.generate(**batch, budget=10, settings={})) >= 0.9


def test_cli_exports_translates_and_evaluates(folders, dates, tmp_path, capsys, built_engines) -> None:
    """Each engine and precision of the command line reaches the engine it builds (CTranslate2's compute type,
    torch's int8 modules or bfloat16 parameters), and translates as well as the float model."""
    float_model = load_model_and_tokenizer(folders["paper"])[0]
    out = tmp_path / "ct2"
    assert main(["export", "--model", str(folders["paper"]), "--format", "ctranslate2", "--output", str(out)]) == 0
    pairs = dates[2][:30]
    source = tmp_path / "src.txt"
    source.write_text("".join(s + "\n" for s, _ in pairs))
    reference = tmp_path / "ref.txt"
    reference.write_text("".join(t + "\n" for _, t in pairs))
    capsys.readouterr()
    checks = [
        (["--engine", "ctranslate2", "--model", str(out)], lambda engine: assert_ct2_computes(engine, "float32")),
        (["--engine", "ctranslate2", "--model", str(out), "--quantize", "int8"],
         lambda engine: assert_ct2_computes(engine, *CT2_INT8)),
        (["--model", str(folders["paper"]), "--quantize", "int8"],
         lambda engine: assert_int8(engine.model, float_model)),
        (["--model", str(folders["paper"]), "--dtype", "bfloat16"], lambda engine: assert_bfloat16(engine.model)),
    ]
    for engine_args, check in checks:
        built_engines.clear()
        assert main(["translate", *engine_args, "--input", str(source), "--num-beams", "1"]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert len(built_engines) == 1, engine_args
        check(built_engines[0])
        assert exact_match(printed, pairs) >= 0.85
    assert main(["evaluate", "--engine", "ctranslate2", "--model", str(out), "--source-file", str(source),
                 "--reference-file", str(reference), "--quantize", "int8"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert_ct2_computes(built_engines[-1], *CT2_INT8)
    assert results["engine"] == "ctranslate2" and results["precision"] in CT2_INT8 and results["bleu"] > 80
    assert main(["export", "--model", str(folders["rnn"]), "--format", "ctranslate2",
                 "--output", str(tmp_path / "r")]) == 2
    assert "no recurrent" in capsys.readouterr().err


def test_evaluate_records_the_engine(folders, dates, tmp_path, built_engines) -> None:
    pairs = dates[2][:10]
    (tmp_path / "s").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "r").write_text("".join(t + "\n" for _, t in pairs))
    results = evaluate_model(folders["rnn"], tmp_path / "s", tmp_path / "r", num_beams=1, quantize="int8",
                             show_progress=False)
    assert (results["engine"], results["precision"]) == ("torch", "int8_float32")
    assert_int8(built_engines[-1].model, load_model_and_tokenizer(folders["rnn"])[0])  # and it computed in int8


def test_random_sources_decode_the_same(exports, folders) -> None:
    """Inputs far from training (random word salad) still give the engine's tokens exactly: no length or special
    token handling differs."""
    rng = random.Random(0)
    words = ["March", "3", "1999", "of", "the", "Mon", ",", "12.03", "21st", "July"]
    sources = [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 9))) for _ in range(100)]
    torch_engine, tokenizer = load_engine(folders["paper"])
    ct2_engine, _ = load_engine(exports["paper"], "ctranslate2")
    for num_beams in (1, 4):
        expected = translate(torch_engine, tokenizer, sources, num_beams=num_beams, max_new_tokens=12)
        got = translate(ct2_engine, tokenizer, sources, num_beams=num_beams, max_new_tokens=12)
        assert same_share(expected, got) >= 0.99


def test_torch_inference_never_loads_ctranslate2() -> None:
    """Its OpenMP runtime would share the process with torch's: translating with torch must not import it."""
    import subprocess

    code = ("import sys, encdec_cli, encdec.inference, encdec.inference.evaluation; "
            "encdec_cli.build_parser(); print('ctranslate2' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout == "False\n"


@pytest.mark.parametrize("num_beams", [1, 3])
def test_max_new_tokens_cuts_both_engines_alike(num_beams, folders, exports, dates) -> None:
    """A budget shorter than the translations: generate() counts </s> within max_new_tokens, and so does the engine."""
    sources = [source for source, _ in dates[2][:50]]
    torch_engine, tokenizer = load_engine(folders["paper"])
    ct2_engine, _ = load_engine(exports["paper"], "ctranslate2")
    for budget in (1, 3, 6):
        expected = translate(torch_engine, tokenizer, sources, num_beams=num_beams, max_new_tokens=budget)
        assert translate(ct2_engine, tokenizer, sources, num_beams=num_beams, max_new_tokens=budget) == expected


def test_n_best_lists_match_across_engines(folders, exports, dates) -> None:
    """num_return_sequences (torch) and num_hypotheses (CTranslate2): the same lists, best first."""
    sources = [source for source, _ in dates[2][:100]]
    torch_engine, tokenizer = load_engine(folders["paper"])
    ct2_engine, _ = load_engine(exports["paper"], "ctranslate2")
    expected = translate_n_best(torch_engine, tokenizer, sources, 3, num_beams=5, max_new_tokens=16)
    got = translate_n_best(ct2_engine, tokenizer, sources, 3, num_beams=5, max_new_tokens=16)
    assert all(len(hypotheses) == 3 for hypotheses in expected)
    assert [h[0] for h in expected] == translate(torch_engine, tokenizer, sources, num_beams=5, max_new_tokens=16)
    assert same_share([h[0] for h in expected], [h[0] for h in got]) >= 0.99
    # below the best, lists can differ: generate() returns its last num_beams finished hypotheses, CTranslate2 the
    # best of the 2 x beam_size it waits for (patience 2, which makes the best ones agree); 89 of 100 lists agree
    assert same_share([" | ".join(h) for h in expected], [" | ".join(h) for h in got]) >= 0.85
    with pytest.raises(EncdecError, match="`n_best` must be between 1 and the beam size \\(2\\)"):
        translate_n_best(ct2_engine, tokenizer, sources, 3, num_beams=2)
    with pytest.raises(EncdecError, match="call `translate_n_best`"):
        translate(torch_engine, tokenizer, sources, num_return_sequences=2)


def test_n_best_scores_agree_across_engines_and_ctranslate2_refuses_alignments(folders, exports, dates) -> None:
    """``translate_detailed``: each hypothesis's score is log P(hypothesis | source) on either engine (CTranslate2
    through ``score_batch``); alignments need the attention, which only the torch engine returns."""
    sources = [source for source, _ in dates[2][:20]]
    torch_engine, tokenizer = load_engine(folders["paper"])
    ct2_engine, _ = load_engine(exports["paper"], "ctranslate2")
    expected = translate_detailed(torch_engine, tokenizer, sources, n_best=2, scores=True, num_beams=4,
                                  max_new_tokens=16)
    got = translate_detailed(ct2_engine, tokenizer, sources, n_best=2, scores=True, num_beams=4, max_new_tokens=16)
    compared = 0
    for mine, theirs in zip(expected, got, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            if a.text == b.text:  # the same hypothesis: the same log-probability
                assert a.score == pytest.approx(b.score, abs=1e-3)
                compared += 1
    assert compared >= 30
    with pytest.raises(EncdecError, match="use --engine torch with --alignments"):
        translate_detailed(ct2_engine, tokenizer, sources[:1], alignments=True)


# -- the note on int8 for models below the size where it measured faster ---------------------------------------------

@pytest.fixture
def random_folders(tmp_path_factory) -> dict[str, Path]:
    """``{"transformer": dir, "rnn": dir}``: random tiny models (d_model 16, hidden_size 16), below every size int8
    was measured at."""
    return build_model_folders(tmp_path_factory.mktemp("random"))


@pytest.fixture
def int8_notes_said(monkeypatch) -> set[str]:
    """The notes said so far: none, so that each test sees the note its command prints (a process says each once)."""
    said: set[str] = set()
    monkeypatch.setattr(engines.int8, "_int8_notes_said", said)
    return said


def test_int8_note_follows_the_measured_thresholds() -> None:
    """Below an engine's measured size the note names the size, the threshold, the engine, the CPU class it was
    measured on, the slowdown and the doc section; at or above it, for a family not measured and for a model config
    without the size, no note. A CPU class not measured gets another class's rule, which the note names."""
    assert INT8_MEASURED, "no measured threshold: scripts/benchmark_int8.py fills INT8_MEASURED"
    for (engine, model_type, cpu), (key, pays_from, slowdown) in INT8_MEASURED.items():
        assert slowdown >= 1.0 and pays_from > 0 and cpu in CPU_CLASSES
        below = {"model_type": model_type, key: pays_from // 2}
        assert int8_note(engine, below, cpu) == (
            f"note: int8 measured slower than float32 for models this small ({key} {pays_from // 2} < {pays_from}) "
            f"on {engine}, on {CPU_CLASSES[cpu]}: up to {slowdown:.1f}x the float32 time; see "
            "docs/fast-inference.md#when-int8-pays")
        assert int8_note(engine, {"model_type": model_type, key: pays_from}, cpu) is None
        assert int8_note(engine, {"model_type": model_type}, cpu) is None
        first = next(measured for name, family, measured in INT8_MEASURED if (name, family) == (engine, model_type))
        assert int8_note(engine, below, "other") == int8_note(engine, below, first)  # "other" is never measured
    assert int8_note("torch", {"model_type": "encdec_ensemble", "d_model": 8}) is None
    assert int8_note("ctranslate2", {"model_type": "rnn_seq2seq", "hidden_size": 8}) is None  # it has no RNN


def test_int8_thresholds_are_the_documented_measurements() -> None:
    """``INT8_MEASURED`` is what docs/fast-inference.md's "When int8 pays" sections, written by
    scripts/benchmark_int8.py, derived: the same engines, families and CPU classes, thresholds and slowdowns."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "fast-inference.md").read_text()
    assert "\n## When int8 pays\n" in doc  # the anchor the note points at
    sections = [part.split("<!-- end: ", 1)[0] for part in doc.split("<!-- begin: int8")[1:]]
    documented = {(engine, family, cpu): (key, int(size), float(worst)) for section in sections
                  for engine, family, cpu, key, size, worst in re.findall(
                      r"^- (\w+), (\w+), ([\w-]+): int8 faster from (\w+) (\d+) on; below it, up to ([\d.]+)x",
                      section, re.MULTILINE)}
    assert documented == {measured: (key, size, pytest.approx(slowdown, abs=0.05))
                          for measured, (key, size, slowdown) in INT8_MEASURED.items()}


def test_cli_notes_int8_for_a_tiny_model_and_not_float32(random_folders, tmp_path, capsys, int8_notes_said) -> None:
    """`encdec translate --quantize int8` of a tiny model prints the note once on stderr (translations on stdout
    are untouched); float32 prints none. The same for `encdec evaluate`, and for CTranslate2: an int8 export says
    it, and so does loading it (it computes in int8 without a flag), while a float32 export loaded as float32
    does not."""
    source = tmp_path / "src.txt"
    source.write_text("Wednesday, 3 Mar 2021\n3/4/1999\n")
    for family, folder in random_folders.items():
        config = load_model_and_tokenizer(folder)[0].config
        note = int8_note("torch", config)
        assert note is not None, f"a {family} of {config.d_model if family == 'transformer' else config.hidden_size}"
        assert main(["translate", "--model", str(folder), "--input", str(source)]) == 0
        float_run = capsys.readouterr()
        assert "note: int8" not in float_run.err
        int8_notes_said.clear()
        assert main(["translate", "--model", str(folder), "--input", str(source), "--quantize", "int8"]) == 0
        int8_run = capsys.readouterr()
        assert int8_run.err.splitlines().count(note) == 1
        assert len(int8_run.out.splitlines()) == 2 and note not in int8_run.out
        int8_notes_said.clear()
        assert main(["evaluate", "--model", str(folder), "--source-file", str(source), "--reference-file",
                     str(source), "--quantize", "int8"]) == 0
        assert note in capsys.readouterr().err.splitlines()
    pytest.importorskip("ctranslate2")
    note = int8_note("ctranslate2", load_model_and_tokenizer(random_folders["transformer"])[0].config)
    assert note is not None
    for quantization in ("float32", "int8"):
        int8_notes_said.clear()
        out = tmp_path / f"ct2-{quantization}"
        assert main(["export", "--model", str(random_folders["transformer"]), "--format", "ctranslate2", "--output",
                     str(out), "--quantization", quantization]) == 0
        assert (note in capsys.readouterr().err.splitlines()) == (quantization == "int8")
        int8_notes_said.clear()
        assert main(["translate", "--engine", "ctranslate2", "--model", str(out), "--input", str(source)]) == 0
        assert (note in capsys.readouterr().err.splitlines()) == (quantization == "int8")
