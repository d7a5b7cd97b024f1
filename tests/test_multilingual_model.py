"""Multilingual models of both families, as transformers' M2M100 / NLLB are: a language token per language in the joint
vocabulary, the source language token before the source, the target language token forced as the first generated
token (``forced_bos_token_id``), the languages in the config and a tokenizer with ``src_lang``/``tgt_lang``.

The toy task: a source is 2-4 digits; its "languages" are what the target does with them, ``copy``, ``rev`` (reversed)
and ``sort`` (sorted), so only the target language token tells the model which output is right. A tiny model of each
family learns all nine directions in a few hundred steps; it is saved, reloaded, run through the pipeline, and loaded
where encdec is not installed (``trust_remote_code``).
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, pipeline

from encdec import RNNSeq2SeqConfig, Seq2SeqMultilingualTokenizer, TransformerSeq2SeqConfig
from encdec.errors import EncdecError, InputFileError, LanguageError
from encdec.folders import check_model_folder, save_for_pipeline
from encdec.tokenization import (
    check_tokenizer_matches_model,
    language_settings,
    multilingual_tokenizer,
    special_token_ids,
    tokenizer_languages,
    train_tokenizer,
)
from remote_code import load_without_encdec
from toy import TINY_MODELS, digit_tokenizer, linear_schedule, right_pad, tiny_model, train_loop

TASKS: dict[str, Callable[[list[str]], list[str]]] = {"copy": list, "rev": lambda d: d[::-1], "sort": sorted}
LANGUAGES = list(TASKS)
# each family's tiny model, a little wider than TINY_MODELS' so that nine directions fit in a few hundred steps
MODELS = {
    "transformer": {**TINY_MODELS["transformer"], "d_model": 32, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
                    "encoder_layers": 2, "decoder_layers": 2},
    "rnn": {**TINY_MODELS["rnn"], "cell_type": "gru", "embedding_dim": 32, "hidden_size": 64},
}
TRAINING = {"transformer": dict(steps=400, lr=5e-3, optimizer=torch.optim.AdamW),
            "rnn": dict(steps=400, lr=2e-2, optimizer=torch.optim.Adam)}
Example = tuple[str, str, list[str]]  # source language, target language, digits


def toy_tokenizer() -> Seq2SeqMultilingualTokenizer:
    """The digits (word level, as toy.py's ``digit_tokenizer``) with ``<unk>`` and the three language tokens."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{str(d): 4 + d for d in range(10)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return multilingual_tokenizer(backend, LANGUAGES)


def examples(n: int, seed: int) -> list[Example]:
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    for _ in range(n):
        length = int(torch.randint(2, 5, (1,), generator=generator))
        digits = [str(d) for d in torch.randint(0, 10, (length,), generator=generator).tolist()]
        source, target = (LANGUAGES[i] for i in torch.randint(0, len(LANGUAGES), (2,), generator=generator).tolist())
        drawn.append((source, target, digits))
    return drawn


def encode(tokenizer: Seq2SeqMultilingualTokenizer, batch: list[Example]) -> tuple[torch.Tensor, ...]:
    """Right-padded input_ids, attention_mask and labels, each direction encoded by the tokenizer with its
    ``src_lang``/``tgt_lang`` and ``text_target``."""
    rows: dict[int, tuple[list[int], list[int]]] = {}
    for direction in {(source, target) for source, target, _ in batch}:
        tokenizer.src_lang, tokenizer.tgt_lang = direction
        picked = [i for i, example in enumerate(batch) if example[:2] == direction]
        encoded = tokenizer([" ".join(batch[i][2]) for i in picked],
                            text_target=[" ".join(TASKS[direction[1]](batch[i][2])) for i in picked])
        rows.update(zip(picked, zip(encoded["input_ids"], encoded["labels"], strict=True), strict=True))
    input_ids = right_pad([rows[i][0] for i in range(len(batch))])
    return input_ids, (input_ids != 0).long(), right_pad([rows[i][1] for i in range(len(batch))], value=-100)


@functools.cache
def trained_model(family: str) -> tuple[PreTrainedModel, Seq2SeqMultilingualTokenizer]:
    """A tiny model of ``family`` trained on all nine directions (seconds), with its tokenizer; shared by the tests
    of this file: they set the tokenizer's languages before each use and do not modify the model."""
    tokenizer, settings = toy_tokenizer(), TRAINING[family]
    steps = settings["steps"]
    model = tiny_model(MODELS[family], **special_token_ids(tokenizer))
    batches: Iterator = (encode(tokenizer, examples(64, seed=step)) for step in range(steps))
    train_loop(model, batches, lr=settings["lr"], optimizer=settings["optimizer"],
               schedule=linear_schedule(steps, warmup=20, decay=steps // 3))
    tokenizer.src_lang, tokenizer.tgt_lang = LANGUAGES[0], None
    return model.eval(), tokenizer


TEST = [digits for _, _, digits in examples(60, seed=10**6)]
SOURCES = [" ".join(digits) for digits in TEST]


@pytest.fixture(scope="module", params=list(MODELS))
def trained(request: pytest.FixtureRequest) -> tuple[PreTrainedModel, Seq2SeqMultilingualTokenizer]:
    return trained_model(request.param)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family's trained model saved as ``encdec train`` saves one (``save_for_pipeline``)."""
    root = tmp_path_factory.mktemp("multilingual")
    saved = {}
    for family in MODELS:
        model, tokenizer = trained_model(family)
        tokenizer.src_lang, tokenizer.tgt_lang = LANGUAGES[0], None
        saved[family] = save_for_pipeline(model, tokenizer, root / f"multilingual-{family}")
    return saved


def generate(model: PreTrainedModel, tokenizer, target: str, source_lang: str = "copy", **kwargs) -> list[str]:
    tokenizer.src_lang = source_lang
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, forced_bos_token_id=tokenizer.get_lang_id(target), max_new_tokens=8, **kwargs)
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def accuracy(outputs: list[str], target: str) -> float:
    """The share of ``outputs`` (for the first sources of ``TEST``) that are right for ``target``."""
    return sum(out.split() == TASKS[target](digits) for out, digits in zip(outputs, TEST, strict=False)) / len(outputs)


# --- the model learns every direction ---------------------------------------------------------------------------------

@pytest.mark.parametrize("num_beams", [1, 3])
def test_the_forced_target_token_decides_the_output_in_every_direction(trained, num_beams: int) -> None:
    model, tokenizer = trained
    for source_lang in LANGUAGES:
        outputs = {target: generate(model, tokenizer, target, source_lang, num_beams=num_beams)
                   for target in LANGUAGES}
        for target, texts in outputs.items():
            assert accuracy(texts, target) >= 0.9, (source_lang, target, texts[:5])
        assert outputs["copy"] != outputs["rev"] != outputs["sort"]


def test_generation_starts_with_the_target_token_cached_or_not_and_sampling(trained) -> None:
    model, tokenizer = trained
    batch = tokenizer(SOURCES[:8], padding=True, return_tensors="pt")
    forced = tokenizer.get_lang_id("rev")
    with torch.no_grad():
        cached = model.generate(**batch, forced_bos_token_id=forced, max_new_tokens=8, use_cache=True)
        uncached = model.generate(**batch, forced_bos_token_id=forced, max_new_tokens=8, use_cache=False)
        beams = [model.generate(**batch, forced_bos_token_id=forced, max_new_tokens=8, num_beams=3, use_cache=cache)
                 for cache in (True, False)]
        sampled = model.generate(**batch, forced_bos_token_id=forced, max_new_tokens=8, do_sample=True, top_k=5,
                                 num_return_sequences=2)
    assert torch.equal(cached, uncached) and torch.equal(*beams)
    assert cached[:, 0].eq(model.config.decoder_start_token_id).all()
    assert cached[:, 1].eq(forced).all() and beams[0][:, 1].eq(forced).all() and sampled[:, 1].eq(forced).all()
    assert tokenizer.decode(cached[0]).split()[:2] == ["<s>", "__rev__"]
    assert "__rev__" not in tokenizer.decode(cached[0], skip_special_tokens=True)


# --- saved folders ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", list(MODELS))
def test_a_saved_folder_reloads_exactly(family: str, folders: dict[str, Path]) -> None:
    folder, (model, tokenizer) = folders[family], trained_model(family)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["languages"] == LANGUAGES
    assert tokenizer_config["language_tokens"] == {code: f"__{code}__" for code in LANGUAGES}
    assert "tokenization_multilingual.py" in check_model_folder(folder)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(loaded_tokenizer) is Seq2SeqMultilingualTokenizer and loaded_tokenizer.languages == LANGUAGES
    for name, weights in model.state_dict().items():
        assert torch.equal(weights, loaded.state_dict()[name]), name
    assert generate(loaded, loaded_tokenizer, "sort") == generate(model, tokenizer, "sort")
    loaded.save_pretrained(folder.parent / f"{family}-resaved")
    assert AutoConfig.from_pretrained(folder.parent / f"{family}-resaved").languages == LANGUAGES


def test_a_folder_without_the_tokenizer_code_is_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    copy = shutil.copytree(folders["rnn"], tmp_path / "copy")
    (copy / "tokenization_multilingual.py").unlink()
    with pytest.raises(InputFileError, match=r"tokenization_multilingual\.py \(code that `trust_remote_code` loading"):
        check_model_folder(copy)


def test_the_pipeline_takes_src_lang_and_tgt_lang(folders: dict[str, Path]) -> None:
    pipe = pipeline(model=str(folders["transformer"]), trust_remote_code=True, src_lang="rev", tgt_lang="sort",
                    device="cpu")
    assert pipe.task == "seq2seq-generation"
    outputs = [record["generated_text"] for record in pipe(SOURCES, max_new_tokens=8)]
    assert accuracy(outputs, "sort") >= 0.9
    per_call = [record["generated_text"] for record in pipe(SOURCES, max_new_tokens=8, tgt_lang="rev")]
    assert accuracy(per_call, "rev") >= 0.9
    assert pipe(SOURCES[0], max_new_tokens=8)[0]["generated_text"] == outputs[0]  # the construction's target again


def test_the_pipeline_refuses_a_missing_or_unknown_language(folders: dict[str, Path], tmp_path: Path) -> None:
    pipe = pipeline(model=str(folders["rnn"]), trust_remote_code=True, device="cpu")
    with pytest.raises(ValueError, match=r"^This model is multilingual \(copy, rev, sort\): pass the target language"):
        pipe(SOURCES[:2])
    with pytest.raises(ValueError, match=r"^Unknown language 'de': this tokenizer knows copy, rev, sort"):
        pipe(SOURCES[:2], tgt_lang="de")
    bilingual_tokenizer = digit_tokenizer()
    bilingual = save_for_pipeline(tiny_model("rnn", **special_token_ids(bilingual_tokenizer)), bilingual_tokenizer,
                                  tmp_path / "bilingual")
    with pytest.raises(ValueError, match=r"^This model is bilingual .*: drop src_lang and tgt_lang\.$"):
        pipeline(model=str(bilingual), trust_remote_code=True, src_lang="de", tgt_lang="fr", device="cpu")
    plain = pipeline(model=str(bilingual), trust_remote_code=True, device="cpu")
    assert plain("3 1", max_new_tokens=3)  # as before: no language flags
    with pytest.raises(ValueError, match=r"^This model is bilingual .*: drop tgt_lang\.$"):
        plain("3 1", tgt_lang="fr")


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_without_encdec_both_families_load_and_translate_as_encdec_does(folders: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    forced = {"greedy": {"max_new_tokens": 8, "num_beams": 1, "forced_bos_token_id": 15},
              "beam": {"max_new_tokens": 8, "num_beams": 3, "forced_bos_token_id": 16}}
    pipeline_kwargs = {"max_new_tokens": 8, "num_beams": 2, "tgt_lang": "sort"}
    assert toy_tokenizer().get_lang_id("rev") == 15
    remote = load_without_encdec(list(folders.values()), SOURCES[:6], tmp_path, forced, pipeline_kwargs)
    for family, folder in folders.items():
        record = remote[str(folder)]
        name, module = record["tokenizer_class"]  # the folder's copy of the class
        assert name == "Seq2SeqMultilingualTokenizer" and module.startswith("transformers_modules."), module
        assert module.endswith(".tokenization_multilingual"), module
        model, tokenizer = trained_model(family)
        tokenizer.src_lang = LANGUAGES[0]
        batch = tokenizer(SOURCES[:6], padding=True, return_tensors="pt")
        assert record["input_ids"] == batch["input_ids"].tolist()
        for name, kwargs in forced.items():
            assert record["generated"][name] == model.generate(**batch, **kwargs).tolist(), (family, name)
        pipe = pipeline(model=str(folder), trust_remote_code=True, device="cpu")
        local = pipe(SOURCES[:6], batch_size=6, **pipeline_kwargs)
        assert record["pipeline"] == local
        assert accuracy([row["generated_text"] for row in local], "sort") >= 0.8


# --- the tokenizer ----------------------------------------------------------------------------------------------------

def test_sources_and_targets_carry_their_language_token(tmp_path: Path) -> None:
    tokenizer = toy_tokenizer()
    assert tokenizer.src_lang == "copy" and tokenizer.tgt_lang is None  # the first language, as M2M100's "en"
    tokenizer.src_lang, tokenizer.tgt_lang = "rev", "sort"
    encoded = tokenizer("3 1 2", text_target="1 2 3")
    assert tokenizer.convert_ids_to_tokens(encoded["input_ids"]) == ["__rev__", "3", "1", "2", "</s>"]
    assert tokenizer.convert_ids_to_tokens(encoded["labels"]) == ["__sort__", "1", "2", "3", "</s>"]
    assert tokenizer.decode(encoded["labels"], skip_special_tokens=True) == "1 2 3"
    assert [tokenizer.get_lang_id(code) for code in LANGUAGES] == [14, 15, 16]
    assert tokenizer.convert_tokens_to_ids("__sort__") == 16
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, src_lang="sort", tgt_lang="copy")
    assert type(loaded) is Seq2SeqMultilingualTokenizer and loaded.language_tokens == tokenizer.language_tokens
    assert loaded("3 1", text_target="3 1")["input_ids"][0] == 16 and loaded("3", text_target="3")["labels"][0] == 14
    assert AutoTokenizer.from_pretrained(tmp_path)("3 1 2")["input_ids"] == encoded["input_ids"]  # as saved


def test_tokenizer_errors_are_one_line_naming_the_languages() -> None:
    tokenizer = toy_tokenizer()
    for set_bad in (lambda: setattr(tokenizer, "src_lang", "de"), lambda: setattr(tokenizer, "tgt_lang", "de"),
                    lambda: tokenizer.get_lang_id("de")):
        with pytest.raises(ValueError, match=r"^Unknown language 'de': this tokenizer knows copy, rev, sort; pass"):
            set_bad()
    with pytest.raises(ValueError, match=r"^Set `tgt_lang` \(one of copy, rev, sort\) before encoding a target"):
        tokenizer("1 2", text_target="2 1")
    with pytest.raises(ValueError, match=r"`language_tokens` names \['__xx__'\], which the vocabulary lacks"):
        Seq2SeqMultilingualTokenizer(tokenizer_object=tokenizer.backend_tokenizer, language_tokens={"xx": "__xx__"},
                                     eos_token="</s>")
    with pytest.raises(EncdecError, match=r"`languages` names \['de'\] more than once"):
        train_tokenizer(SOURCES, vocab_size=30, languages=["de", "de"])


def test_train_tokenizer_adds_language_tokens_after_the_trained_vocabulary() -> None:
    texts = [f"{source} {source[::-1]}" for source in SOURCES]
    bilingual = train_tokenizer(texts, vocab_size=30)
    multilingual = train_tokenizer(texts, vocab_size=30, languages=["de", "fr"])
    assert type(bilingual).__name__ == "TokenizersBackend" and tokenizer_languages(bilingual) is None
    assert len(multilingual) == len(bilingual) + 2 and multilingual.get_lang_id("fr") == len(bilingual) + 1
    assert multilingual.get_vocab() == {**bilingual.get_vocab(), "__de__": len(bilingual), "__fr__": len(bilingual) + 1}
    assert multilingual("12")["input_ids"] == [multilingual.get_lang_id("de"), *bilingual("12")["input_ids"]]
    assert special_token_ids(multilingual) == {**special_token_ids(bilingual), "vocab_size": len(bilingual) + 2,
                                               "languages": ["de", "fr"]}


def test_languages_keep_the_model_s_order_through_a_save(tmp_path: Path) -> None:
    """tokenizer_config.json keeps ``language_tokens`` with sorted keys (transformers saves with ``sort_keys``); the
    reloaded tokenizer lists the languages in the order their tokens were added, the model config's order, so a
    folder of ``languages: [de, en, fr, cs]`` loads, and its default source language stays the first."""
    texts = [f"{source} {source[::-1]}" for source in SOURCES]
    tokenizer = train_tokenizer(texts, vocab_size=30, languages=["de", "en", "fr", "cs"])
    tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))["language_tokens"]
    assert list(saved) == ["cs", "de", "en", "fr"]  # what made the reloaded order differ
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer_languages(loaded) == ["de", "en", "fr", "cs"] and loaded.src_lang == "de"
    check_tokenizer_matches_model(loaded, tiny_model("rnn", **special_token_ids(tokenizer)).config)


def test_language_settings_force_the_target_or_name_the_languages() -> None:
    tokenizer = toy_tokenizer()
    assert language_settings(tokenizer, "rev", "sort") == {"forced_bos_token_id": 16} and tokenizer.src_lang == "rev"
    assert language_settings(tokenizer, target_lang="copy") == {"forced_bos_token_id": 14}
    with pytest.raises(LanguageError, match=r"^This model has no language 'de'; its languages are copy, rev, sort\.$"):
        language_settings(tokenizer, "de", "rev")
    with pytest.raises(LanguageError, match=r"^This model is multilingual \(copy, rev, sort\): name the target"):
        language_settings(tokenizer, "rev")
    bilingual = digit_tokenizer()
    assert language_settings(bilingual) == {}
    with pytest.raises(LanguageError, match=r"^This model is bilingual .* takes no language; drop 'fr'\.$"):
        language_settings(bilingual, target_lang="fr")


# --- the config -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config_class", [TransformerSeq2SeqConfig, RNNSeq2SeqConfig])
def test_languages_are_saved_and_a_bilingual_config_is_unchanged(config_class, tmp_path: Path) -> None:
    config_class(vocab_size=40, languages=("de", "fr")).save_pretrained(tmp_path / "multi")
    config_class(vocab_size=40).save_pretrained(tmp_path / "bi")
    assert json.loads((tmp_path / "multi" / "config.json").read_text())["languages"] == ["de", "fr"]
    assert "languages" not in json.loads((tmp_path / "bi" / "config.json").read_text())
    assert AutoConfig.from_pretrained(tmp_path / "multi").languages == ["de", "fr"]
    assert AutoConfig.from_pretrained(tmp_path / "bi").languages is None
    assert config_class(vocab_size=40, languages=[]).languages is None


@pytest.mark.parametrize(("languages", "message"), [
    (["de", "de"], r"^`languages` names \['de'\] more than once; list each language once\.$"),
    (["de", ""], r"^`languages` must be a list of language codes such as \['de', 'en', 'fr'\]"),
    ("de", r"^`languages` must be a list of language codes"),
    (["d e"], r"^`languages` must be a list of language codes"),
])
def test_bad_languages_are_refused_naming_the_field(languages, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransformerSeq2SeqConfig(vocab_size=40, languages=languages)


def test_tokenizer_and_model_must_agree_on_the_languages() -> None:
    tokenizer = toy_tokenizer()
    ids = special_token_ids(tokenizer)
    check_tokenizer_matches_model(tokenizer, tiny_model("rnn", **ids).config)
    for languages in (None, ["copy", "sort", "rev"]):
        with pytest.raises(ValueError, match=r"^Tokenizer and model disagree on `languages`: tokenizer has \['copy'"):
            check_tokenizer_matches_model(tokenizer, tiny_model("rnn", **{**ids, "languages": languages}).config)
    bilingual = digit_tokenizer()
    with pytest.raises(ValueError, match=r"^Tokenizer and model disagree on `languages`: tokenizer has None"):
        check_tokenizer_matches_model(bilingual, tiny_model("rnn", **special_token_ids(bilingual),
                                                            languages=["de", "fr"]).config)
