"""Several models in one server (encdec.serving.ServedModels): ``--model [SRC-TGT=]DIR[,option=value]`` parsed and
refused in one line, each model's pair from its card or its argument, and requests routed by pair or name."""

from __future__ import annotations

import shutil

import pytest
from huggingface_hub import ModelCard

from encdec.cards import data_languages, write_model_card
from encdec.cli import main
from encdec.errors import EncdecError
from encdec.folders import save_for_pipeline
from encdec.inference import load_model_and_tokenizer, translate
from encdec.server import build_service, create_app
from encdec.serving import ModelSpec, RequestError, ServedModels
from test_serve import Server, request
from tiny_model_folders import DATE_RNN, DATE_TRANSFORMER, date_data, train_on_dates


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


@pytest.mark.parametrize(("value", "message"), [
    ("de=runs/a", "is not DIR or SRC-TGT=DIR"),
    ("de-en=", "is not DIR or SRC-TGT=DIR"),
    ("DE-EN=runs/a", "is not DIR or SRC-TGT=DIR"),
    ("de-en=runs/a,engine=onnx", "engine=onnx is not an option; the options are engine=torch|ctranslate2"),
    ("runs/a,beams=4", "beams=4 is not an option"),
])
def test_malformed_model_arguments_are_refused_in_one_line(value: str, message: str) -> None:
    with pytest.raises(EncdecError, match=message):
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
    assert models.languages() == [{"code": "de", "name": "German", "targets": ["en"]},
                                  {"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "fr", "name": "French", "targets": ["en"]}]
    with pytest.raises(RequestError, match="no model translates de into fr; the served ones are de-en, en-de, fr-en"):
        models.pick("de", "fr")
    with pytest.raises(RequestError, match="several models are served: give source and target") as error:
        models.pick(source="de")
    assert error.value.field == "target"
    with pytest.raises(RequestError, match="no model 'xx' is served"):
        models.pick(model="xx")


def test_one_model_is_served_as_before_and_named_by_its_folder(folder) -> None:
    models = load(str(folder))
    only = models.pick()
    assert (only.name, only.source, only.target) == ("dates", None, None)
    assert models.languages() == []


def test_two_models_for_one_pair_and_a_contradicted_card_are_refused(folder, tmp_path) -> None:
    de_en = copy_with_card(folder, tmp_path, "a", ["de", "en"])
    other = copy_with_card(folder, tmp_path, "b", None)
    with pytest.raises(EncdecError, match="Two --model arguments serve de-en"):
        load(str(de_en), f"de-en={other}")
    with pytest.raises(EncdecError, match=r"its model card says de-en; give the card's pair"):
        load(f"fr-en={de_en}")


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
        assert status == 422 and body["field"] == "source" and "several models are served" in body["error"]
        _, info, _ = request(f"{server.url}/info")
        assert [(m["name"], m["source"], m["target"]) for m in info["models"]] == [("de-en", "de", "en"),
                                                                                   ("en-de", "en", "de")]
        assert set(server.server.config.app.app.state.batchers) == {"de-en", "en-de"}


def test_the_command_refuses_bad_model_arguments_before_it_starts(folder, capsys) -> None:
    assert main(["serve", "--model", f"de={folder}"]) == 2
    assert "is not DIR or SRC-TGT=DIR" in capsys.readouterr().err
    assert main(["serve", "--model", f"de-en={folder}", "--model", f"de-en={folder}"]) == 2
    assert "Two --model arguments serve de-en" in capsys.readouterr().err
