"""Several models in one server (encdec.serve.ServedModels): ``--model [SRC-TGT=]DIR[,option=value]`` parsed and
refused in one line (the exact message), each model's pair from its card or its argument, requests routed by pair or
name, each model served in its own engine and precision (int8, bfloat16: checked on the loaded model), and the pair
that `encdec train` writes on the card routing requests to the model it trained."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from huggingface_hub import ModelCard

from encdec.cards import data_languages, write_model_card
from encdec.data import make_date_pairs
from encdec.errors import EncdecError
from encdec.folders import save_for_pipeline
from encdec.inference import load_engine, load_model_and_tokenizer, translate
from encdec.serve import ModelSpec, RequestError, ServedModels
from encdec.serve.libretranslate.api import languages
from encdec.serve.server import build_service, create_app, load_models
from encdec.ship.ctranslate2_export import export_ctranslate2
from encdec_cli import main
from test_serve import Server, request
from tiny_model_folders import DATE_RNN, DATE_TRANSFORMER, date_data, train_on_dates, write_tiny_run_config
from toy import TINY_MODELS


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    dates = date_data()
    return save_for_pipeline(train_on_dates(DATE_TRANSFORMER, dates, 20, 3e-3), dates[0],
                             tmp_path_factory.mktemp("models") / "dates")


def copy_with_card(folder, root, name: str, languages: list[str] | None):
    copy = shutil.copytree(folder, root / name)
    if languages:
        write_model_card(copy, languages=languages, overwrite=True)
    return copy


CONTRADICTED = "--model fr-en={}: its model card says de-en; give the card's pair, or fix the card."
TWO_NAMED = ("Two --model arguments are both named {} (a pair is served by the first model listed for it, a later one "
             "by its folder's name); give each folder a name of its own.")


def load(*values: str) -> ServedModels:
    return ServedModels.load([ModelSpec.parse(value) for value in values],
                             lambda model_dir, options: build_service(model_dir, **options), {"engine": "torch"})


@pytest.mark.parametrize(("value", "expected"), [
    ("runs/a", ("runs/a", None, None, ())),
    ("de-en=runs/a", ("runs/a", "de", "en", ())),
    ("zh_Hant-en=/abs/x-y", ("/abs/x-y", "zh_Hant", "en", ())),
    ("de-en=runs/a-ct2,engine=ctranslate2,quantize=int8",
     ("runs/a-ct2", "de", "en", (("engine", "ctranslate2"), ("quantize", "int8")))),
])
def test_model_arguments_parse(value: str, expected: tuple) -> None:
    spec = ModelSpec.parse(value)
    assert (spec.model_dir, spec.source, spec.target, spec.options) == expected


OPTIONS = "the options are engine=torch|ctranslate2|onnxruntime, quantize=int8, dtype=float32|bfloat16."
MALFORMED = ("is not DIR or SRC-TGT=DIR (language codes such as de-en=runs/de-en: ISO 639 codes of 2 or 3 lowercase "
             "letters, optionally _Script or _REGION as in zh_Hant; optionally followed by ,engine=E ,quantize=Q or "
             ",dtype=D: engine=torch|ctranslate2|onnxruntime, quantize=int8, dtype=float32|bfloat16).")


@pytest.mark.parametrize(("value", "message"), [
    ("de=runs/a", f"--model 'de=runs/a' {MALFORMED}"),
    ("de-en=", f"--model 'de-en=' {MALFORMED}"),
    ("DE-EN=runs/a", f"--model 'DE-EN=runs/a' {MALFORMED}"),
    ("date-iso=runs/a", f"--model 'date-iso=runs/a' {MALFORMED}"),  # not language codes: the rule is said
    ("de-en=runs/a,engine=onnx", f"--model 'de-en=runs/a,engine=onnx': engine=onnx is not an option; {OPTIONS}"),
    ("runs/a,beams=4", f"--model 'runs/a,beams=4': beams=4 is not an option; {OPTIONS}"),
])
def test_malformed_model_arguments_are_refused_in_one_line(value: str, message: str) -> None:
    with pytest.raises(EncdecError, match=f"^{re.escape(message)}$"):
        ModelSpec.parse(value)


def test_pairs_come_from_the_argument_or_the_card_and_route_requests(folder, tmp_path) -> None:
    de_en = copy_with_card(folder, tmp_path, "a", ["de", "en"])
    en_de = copy_with_card(folder, tmp_path, "b", None)
    fr_en = copy_with_card(folder, tmp_path, "c", None)
    models = load(str(de_en), f"en-de={en_de}", f"fr-en={fr_en}")
    assert list(models.models) == ["de-en", "en-de", "fr-en"]
    assert models.pick("de", "en").service.model_dir == de_en
    assert models.pick("en", "de").service.model_dir == en_de
    assert models.pick(model="fr-en").source == "fr"
    assert languages(models) == [{"code": "de", "name": "German", "targets": ["en"]},
                                  {"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "fr", "name": "French", "targets": ["de", "en"]}]  # de: through en
    with pytest.raises(RequestError, match="^target: no model translates de into fr; the served ones are de-en, "
                                           "en-de, fr-en.$"):
        models.pick("de", "fr")
    with pytest.raises(RequestError, match=re.escape("target: several models are served: give source and target (or "
                                                     "model); the served ones are de-en, en-de, fr-en.")) as error:
        models.pick(source="de")
    assert error.value.field == "target"
    with pytest.raises(RequestError, match="^model: no model 'xx' is served; the served ones are de-en, en-de, "
                                           "fr-en.$"):
        models.pick(model="xx")


def test_one_model_is_served_as_before_and_named_by_its_folder(folder) -> None:
    models = load(str(folder))
    only = models.pick()
    assert (only.name, only.source, only.target) == ("dates", None, None)
    assert languages(models) == []


def test_two_models_of_one_name_and_a_contradicted_card_are_refused(folder, tmp_path) -> None:
    """Two models of one pair: the first listed serves it, the second is named by its folder; two of one name are
    refused."""
    de_en = copy_with_card(folder, tmp_path, "a", ["de", "en"])
    other = copy_with_card(folder, tmp_path, "b", None)
    models = load(str(de_en), f"de-en={other}")
    assert [(name, model.service.model_dir) for name, model in models.models.items()] == [("de-en", de_en),
                                                                                          ("b", other)]
    with pytest.raises(EncdecError, match=f"^{re.escape(TWO_NAMED.format('b'))}$"):
        load(str(de_en), f"de-en={other}", str(other))
    with pytest.raises(EncdecError, match=f"^{re.escape(CONTRADICTED.format(de_en))}$"):
        load(f"fr-en={de_en}")


def test_a_card_of_several_languages_serves_any_two_of_them(folder, tmp_path) -> None:
    """A card that names more than two languages (a model of several) names no pair of its own: the model is served
    by its folder's name, or as any pair of its languages; a pair outside them is refused, naming the card's."""
    many = copy_with_card(folder, tmp_path, "many", ["de", "en", "fr"])
    assert list(load(str(many)).models) == ["many"]
    models = load(f"fr-de={many}", f"en-fr={many}")
    assert [(model.name, model.source, model.target) for model in models.models.values()] == [
        ("fr-de", "fr", "de"), ("en-fr", "en", "fr")]
    with pytest.raises(EncdecError, match=f"^{re.escape(f'--model uk-en={many}: its model card names the languages')}"
                                          " de, en, fr; give two of them, or fix the card.$"):
        load(f"uk-en={many}")


def test_cards_record_the_language_pair_of_the_data(folder, tmp_path) -> None:
    assert data_languages({"source_lang": "de", "target_lang": "en"}) == ["de", "en"]
    assert data_languages({"source_lang": None, "target_lang": "en"}) is None
    card = ModelCard.load(write_model_card(copy_with_card(folder, tmp_path, "a", None), languages=["de", "en"],
                                           overwrite=True))
    assert card.data.language == ["de", "en"]


def test_one_server_translates_with_the_model_of_each_pair(folder, tmp_path) -> None:
    """Requests for two pairs, each answered by its own model (its own batcher), as `encdec translate` would."""
    dates = date_data()
    rnn = save_for_pipeline(train_on_dates(DATE_RNN, dates, 20, 5e-3), dates[0], tmp_path / "rnn")
    models = load(f"de-en={folder}", f"en-de={rnn}")
    texts = [source for source, _ in dates[2][:3]]
    expected = {pair: translate(*load_model_and_tokenizer(str(path)), texts, num_beams=1)
                for pair, path in (("de-en", folder), ("en-de", rnn))}
    assert expected["de-en"] != expected["en-de"]  # the two models answer differently: routing shows
    with Server(create_app(models)) as server:
        for pair, (source, target) in (("de-en", ("de", "en")), ("en-de", ("en", "de"))):
            status, body, _ = request(f"{server.url}/translate", {"text": texts, "source": source, "target": target,
                                                                  "num_beams": 1})
            assert status == 200 and [t["text"] for t in body["translations"]] == expected[pair]
            status, body, _ = request(f"{server.url}/translate", {"text": texts, "model": pair, "num_beams": 1})
            assert [t["text"] for t in body["translations"]] == expected[pair]
        status, body, _ = request(f"{server.url}/translate", {"text": "x"})
        assert (status, body["field"], body["error"]) == (422, "source", "source: several models are served: give "
                                                          "source and target (or model); the served ones are de-en, "
                                                          "en-de.")
        _, info, _ = request(f"{server.url}/info")
        assert [(m["name"], m["source"], m["target"]) for m in info["models"]] == [("de-en", "de", "en"),
                                                                                   ("en-de", "en", "de")]
        assert set(server.server.config.app.app.state.batchers) == {"de-en", "en-de"}


def test_the_command_refuses_bad_model_arguments_before_it_starts(folder, capsys) -> None:
    assert main(["serve", "--model", f"de={folder}"]) == 2
    assert capsys.readouterr().err == f"encdec serve: error: --model 'de={folder}' {MALFORMED}\n"
    assert main(["serve", "--model", f"de-en={folder}", "--model", f"de-en={folder}", "--model", str(folder)]) == 2
    assert capsys.readouterr().err == f"encdec serve: error: {TWO_NAMED.format('dates')}\n"


def test_each_model_serves_in_its_own_engine_and_precision(folder, tmp_path) -> None:
    """`--model de-en=DIR,quantize=int8 --model en-de=EXPORT,engine=ctranslate2,quantize=int8 --model
    fr-en=DIR,dtype=bfloat16`, with no command-wide option (``load_models``, as `encdec serve` calls it): the loaded
    torch model has dynamic int8 linear layers in place of every float one, CTranslate2 computes in int8, the third
    model's weights are bfloat16; /info says so, and each answers as its engine does offline with the same option."""
    pytest.importorskip("ctranslate2")
    exported = export_ctranslate2(folder, tmp_path / "ct2")
    options = {"de-en": (folder, "torch", {"quantize": "int8"}),
               "en-de": (exported, "ctranslate2", {"quantize": "int8"}),
               "fr-en": (folder, "torch", {"dtype": "bfloat16"})}
    models = load_models([f"de-en={folder},quantize=int8", f"en-de={exported},engine=ctranslate2,quantize=int8",
                          f"fr-en={folder},dtype=bfloat16"])
    int8 = models.pick(model="de-en").service.engine.model
    assert not [m for m in int8.modules() if type(m) is torch.nn.Linear]
    assert len([m for m in int8.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]) == \
        len([m for m in load_model_and_tokenizer(str(folder))[0].modules() if isinstance(m, torch.nn.Linear)])
    assert models.pick(model="en-de").service.engine.translator.compute_type == "int8_float32"
    assert {p.dtype for p in models.pick(model="fr-en").service.engine.model.parameters()} == {torch.bfloat16}
    texts = [source for source, _ in date_data()[2][:2]]
    with Server(create_app(models)) as server:
        _, info, _ = request(f"{server.url}/info", timeout=60)
        answers = {pair: [request(f"{server.url}/translate", {"text": text, "model": pair}, timeout=60)[1]
                          for text in texts] for pair in options}
    assert [(m["name"], m["engine"], m["compute_type"]) for m in info["models"]] == [
        ("de-en", "torch", "int8_float32"), ("en-de", "ctranslate2", "int8_float32"), ("fr-en", "torch", "bfloat16")]
    for pair, (path, engine, precision) in options.items():  # one text a request: a batch of one, as offline
        offline = [translate(*load_engine(str(path), engine, **precision), [text])[0] for text in texts]
        assert answers[pair] == [{"translations": [{"text": text}]} for text in offline], pair


def test_encdec_train_writes_the_languages_that_serve_routes_by(folder, tmp_path) -> None:
    """`encdec train` on de/en text files (the config's source_lang and target_lang) writes them on the model card;
    `encdec serve --model DIR` (no pair given) serves the folder as de-en, and a request for de -> en reaches it,
    beside another model served as en-de."""
    data = tmp_path / "data"
    data.mkdir()
    pairs = make_date_pairs(64, seed=3)
    for suffix, side in (("de", 0), ("en", 1)):
        (data / f"train.{suffix}").write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    config = write_tiny_run_config(tmp_path / "run.yaml", "transformer", TINY_MODELS["transformer"], {
        "data": {"format": "text", "data_dir": str(data), "splits": {"train": "train"}, "source_lang": "de",
                 "target_lang": "en"},
        "tokenizer": {"vocab_size": 100},
        "training": {"output_dir": str(tmp_path / "trained"), "eval_strategy": "no", "report_to": "none",
                     "per_device_train_batch_size": 16, "warmup_steps": 1, "logging_steps": 1}})
    assert main(["train", str(config), "--training.max_steps", "2"]) == 0
    trained = tmp_path / "trained"
    assert ModelCard.load(trained / "README.md").data.language == ["de", "en"]
    text = pairs[0][0]
    expected = {pair: translate(*load_model_and_tokenizer(str(path)), [text])[0]
                for pair, path in (("de-en", trained), ("en-de", folder))}
    assert expected["de-en"] != expected["en-de"]  # the two models answer differently: the routing shows
    with Server(create_app(load_models([str(trained), f"en-de={folder}"]))) as server:
        _, info, _ = request(f"{server.url}/info", timeout=60)
        answers = {pair: request(f"{server.url}/translate", {"text": text, "source": pair[:2], "target": pair[3:]},
                                 timeout=60)[1] for pair in expected}
    assert [(m["name"], m["source"], m["target"], m["folder"]) for m in info["models"]] == [
        ("de-en", "de", "en", "trained"), ("en-de", "en", "de", "dates")]
    assert answers == {pair: {"translations": [{"text": answer}]} for pair, answer in expected.items()}
