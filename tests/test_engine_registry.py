"""The backends' registry (encdec.backends): the command line's and the server's choices are the
registry's, capability questions (alignments, ensembles, precisions, families) are answered by it, and an engine
declared in one registry line (with its module: here this file's ``EchoEngine``) is selectable everywhere without
editing another file."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer, GenerationConfig

from encdec.errors import EncdecError
from encdec.inference import load_engine, translate, translate_detailed
from encdec.inference.decoding import require_alignments
from encdec.inference.engines import (
    BACKENDS,
    DTYPE_CHOICES,
    ENGINES,
    QUANTIZE_CHOICES,
    Backend,
    Engine,
    TorchEngine,
    check_precision,
    option_choices,
    register,
)
from encdec.inference.engines.ctranslate2_engine import CT2_INSTALL, CTranslate2Engine
from encdec.inference.tagged import translate_tagged
from encdec.serve import ModelSpec, RequestError, TranslationService
from encdec.serve.server import load_models
from encdec_cli import build_parser, main
from toy import BOS, EOS, PAD, digit_tokenizer

ENGINE_FLAGS = {"--engine": "engine", "--quantize": "quantize", "--dtype": "dtype"}
TODAY_NO_ALIGNMENTS = ("Alignments come from the model's attention, which the ctranslate2 engine does not return; use "
                       "--engine torch with --alignments.")


class EchoEngine(Engine):
    """An engine for the tests: it translates a source into itself, and scores every token log P = 0."""

    name = "echo"

    def __init__(self, folder: Path, quantize: str | None = None, dtype: str | None = None) -> None:
        check_precision(self.spec, quantize, dtype)
        self.config = SimpleNamespace(model_type=json.loads((folder / "echo.json").read_text())["model_type"],
                                      eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=BOS)
        self.generation_config = GenerationConfig()

    @classmethod
    def load(cls, model_dirs, quantize=None, dtype=None, device="cpu"):
        return cls(Path(model_dirs[0]), quantize, dtype), AutoTokenizer.from_pretrained(model_dirs[0])

    @property
    def precision(self) -> str:
        return "float32"

    def generate(self, input_ids, attention_mask, budget, settings):
        return [[BOS, *row[mask.bool()].tolist(), EOS] for row, mask in zip(input_ids, attention_mask, strict=True)]

    def teacher_forced(self, source_ids, target_ids, alignment=False):
        return [0.0] * len(target_ids), None


@pytest.fixture
def echo_engine():
    """The echo engine registered for the test, in one line as encdec.backends declares its own; the registry as it was
    afterwards."""
    before = dict(BACKENDS)
    yield register(Backend("echo", __name__, "EchoEngine", "each source as it is", alignments=False,
                              ensembles=False, quantize=("int4",), dtypes=("float32",), families=("echo",)))
    BACKENDS.clear()
    BACKENDS.update(before)


def echo_folder(path: Path, model_type: str = "echo") -> Path:
    """A folder the echo engine reads: the digit tokenizer and the model type."""
    digit_tokenizer().save_pretrained(path)
    (path / "echo.json").write_text(json.dumps({"model_type": model_type}))
    return path


def parser_choices(parser, command: str) -> dict[str, tuple]:
    """``{"engine": choices, "quantize": ..., "dtype": ...}`` of one subcommand's flags, and ``default``: --engine's."""
    sub = next(action for action in parser._actions if action.dest == "command").choices[command]
    actions = {flag: action for action in sub._actions for flag in action.option_strings}
    return {**{key: tuple(actions[flag].choices) for flag, key in ENGINE_FLAGS.items()},
            "default": actions["--engine"].default}


@pytest.mark.parametrize("command", ["translate", "evaluate", "serve"])
def test_the_cli_offers_the_registry_s_choices(command) -> None:
    expected = {**option_choices(), "default": "torch"}
    assert parser_choices(build_parser(), command) == expected
    assert expected["engine"] == ("torch", "ctranslate2", "onnxruntime") == ENGINES  # built in, torch the default
    assert (expected["quantize"], expected["dtype"]) == (QUANTIZE_CHOICES, DTYPE_CHOICES) == (("int8",),
                                                                                           ("float32", "bfloat16"))


def test_the_cli_reads_the_registry_without_importing_encdec() -> None:
    """``encdec --help`` loads encdec/backends.py by its location: the same choices, and neither encdec nor torch
    imported."""
    code = ("import json, sys, encdec_cli\n"
            "from encdec_cli.parser import engine_registry\n"
            "parser = encdec_cli.build_parser()\n"
            "sub = next(a for a in parser._actions if a.dest == 'command').choices['translate']\n"
            "flags = {f: list(a.choices) for a in sub._actions for f in a.option_strings if a.choices}\n"
            "print(json.dumps([flags['--engine'], flags['--quantize'], flags['--dtype'], engine_registry().__name__,\n"
            "                  sorted(m for m in ('encdec', 'torch') if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    choices = option_choices()
    assert json.loads(done.stdout) == [list(choices["engine"]), list(choices["quantize"]), list(choices["dtype"]),
                                       "_encdec_cli_engine_registry", []]


def test_the_server_s_model_options_are_the_registry_s() -> None:
    choices = option_choices()
    for key, values in choices.items():
        for value in values:
            assert ModelSpec.parse(f"de-en=runs/a,{key}={value}").options == ((key, value),)
    with pytest.raises(EncdecError) as refused:
        ModelSpec.parse("runs/a,engine=onnx")
    known = ", ".join(f"{key}={'|'.join(values)}" for key, values in choices.items())
    assert str(refused.value).endswith(f"engine=onnx is not an option; the options are {known}.")


def test_a_registered_engine_is_selectable_everywhere(echo_engine, tmp_path, capsys) -> None:
    """One registry line: the CLI offers it (and its quantize mode) and translates with it, the server's --model spec
    takes it and serves it, and load_engine builds it."""
    folder = echo_folder(tmp_path / "echo")
    choices = parser_choices(build_parser(), "translate")
    assert choices["engine"][-1] == "echo" and "int4" in choices["quantize"]
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("3 1 4\n\n2 7\n")
    assert main(["translate", "--engine", "echo", "--quantize", "int4", "--model", str(folder), "--input",
                 str(source), "--output", str(output), "--quiet"]) == 0
    assert output.read_text() == "3 1 4\n\n2 7\n"
    engine, tokenizer = load_engine(folder, "echo")
    assert isinstance(engine, EchoEngine) and translate(engine, tokenizer, ["5 9"]) == ["5 9"]
    served = load_models([f"de-en={folder},engine=echo"]).pick("de", "en").service
    assert (served.info()["engine"], served.info()["alignments"]) == ("echo", False)
    with pytest.raises(RequestError, match="alignments are not available: the echo engine returns none"):
        served.options(return_alignments=True)


def test_glossaries_and_markup_need_an_engine_that_gives_the_attention(echo_engine, tmp_path) -> None:
    engine, tokenizer = load_engine(echo_folder(tmp_path / "echo"), "echo")
    with pytest.raises(EncdecError, match="^A glossary puts its terms in through the model's attention, which the "
                                          "echo engine does not return; use --engine torch.$"):
        translate(engine, tokenizer, ["3 1"], glossary={"3": "three"})
    with pytest.raises(EncdecError, match="^Markup is put back through the model's attention, which the echo engine "
                                          "does not return; use --engine torch.$"):
        translate_tagged(engine, tokenizer, ["<b>3</b> 1"])


def test_the_registry_answers_what_an_engine_supports(echo_engine, tmp_path) -> None:
    """Alignments, ensembles, precisions and families are refused as the engine's registry entry says, naming the
    engines that have them."""
    folder = echo_folder(tmp_path / "echo")
    engine, tokenizer = load_engine(folder, "echo")
    with pytest.raises(EncdecError, match="which the echo engine does not return; use --engine torch with "):
        translate_detailed(engine, tokenizer, ["3 1"], alignments=True)
    with pytest.raises(EncdecError, match=r"An ensemble \(2 --model folders\) decodes with --engine torch only; "
                                          "--engine echo takes one model."):
        load_engine([folder, folder], "echo")
    with pytest.raises(EncdecError, match=r"`dtype` must be one of \['float32'\] \(or none\), got 'bfloat16'"):
        load_engine(folder, "echo", dtype="bfloat16")
    other = echo_folder(tmp_path / "other", model_type="rnn_seq2seq")
    with pytest.raises(EncdecError, match="The echo engine decodes echo models; .*other holds a rnn_seq2seq model"):
        load_engine(other, "echo")
    register(dataclasses.replace(echo_engine, ensembles=True))
    with pytest.raises(EncdecError, match="decodes with --engine torch or --engine echo only"):
        load_engine([folder, folder], "ctranslate2")


def test_the_fixture_restores_the_registry() -> None:
    assert list(BACKENDS) == ["torch", "ctranslate2", "onnxruntime", "web"]


def ct2_stand_in() -> CTranslate2Engine:
    """A CTranslate2 engine without a translator (ctranslate2 need not be installed): enough to ask what it does."""
    engine = CTranslate2Engine.__new__(CTranslate2Engine)
    engine.config = SimpleNamespace(model_type="transformer_seq2seq", eos_token_id=EOS, pad_token_id=PAD,
                                    max_position_embeddings=64)
    engine.generation_config = GenerationConfig()
    return engine


def test_ctranslate2_s_alignments_are_refused_as_its_entry_says(monkeypatch) -> None:
    """The refusal of today, word for word, from the registry's ``alignments`` flag: flip the flag and it is gone."""
    engine = ct2_stand_in()
    with pytest.raises(EncdecError) as refused:
        require_alignments(engine)
    assert str(refused.value) == TODAY_NO_ALIGNMENTS
    service = TranslationService(engine, digit_tokenizer())
    with pytest.raises(RequestError, match="^return_alignments: alignments are not available: the ctranslate2 engine "
                                           "returns none; leave it out.$"):
        service.options(return_alignments=True)
    monkeypatch.setitem(BACKENDS, "ctranslate2", dataclasses.replace(BACKENDS["ctranslate2"], alignments=True))
    require_alignments(engine)  # no refusal: the answer is the registry's, not the engine's name


def test_the_built_in_entries_say_what_the_code_does(trained_tiny_transformer) -> None:
    ct2, torch_entry = BACKENDS["ctranslate2"], BACKENDS["torch"]
    assert (ct2.alignments, ct2.ensembles, ct2.families, ct2.install) == (False, False, ("transformer_seq2seq",),
                                                                          CT2_INSTALL)
    assert (torch_entry.alignments, torch_entry.ensembles, torch_entry.families) == (True, True, None)
    assert torch_entry.engine_class() is TorchEngine and ct2.engine_class() is CTranslate2Engine
    engine = TorchEngine(trained_tiny_transformer)
    require_alignments(engine)  # torch returns the attention
    weights = translate_detailed(engine, digit_tokenizer(), ["3 1 4"], alignments=True)[0][0].attention
    assert weights is not None and torch.isfinite(weights).all()
