"""One decode (encdec.inference.decoding): options resolved once from the model's generation config and checked once,
whose error names the option in each front end's words; and the same request, through the command line, the native
server API, LibreTranslate's API and distillation's teacher settings, resolves to equal options."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from transformers import GenerationConfig

import encdec.inference.corpus
from encdec.errors import OptionError
from encdec.inference import load_engine, translate, translate_n_best_ids
from encdec.inference.decoding import DecodeLimits, DecodeOptions, resolve_options
from encdec.inference.evaluation import evaluate_model
from encdec.recipes.distill import DistillConfig, TeacherSettings, translate_sources
from encdec.serve import TranslationService, served_as
from encdec.serve.core import decode_options
from encdec.serve.libretranslate.api import alternatives_of
from encdec.serve.server import request_schema
from encdec_cli import main
from tiny_model_folders import build_model_folders

DEFAULTS = {"num_beams": 2, "length_penalty": 0.7, "max_new_tokens": 9}  # the test model's generation config


def test_the_model_s_generation_config_fills_what_is_not_asked() -> None:
    config = GenerationConfig(**DEFAULTS)
    assert resolve_options(config) == DecodeOptions(num_beams=2, length_penalty=0.7, max_new_tokens=9)
    assert resolve_options(config, num_beams=1, length_penalty=2.0) == DecodeOptions(max_new_tokens=9)  # greedy
    assert resolve_options(GenerationConfig()) == DecodeOptions()  # greedy, budget from the source length
    assert resolve_options(config, length_penalty=0.0, max_new_tokens=5).length_penalty == 0.0
    sampled = resolve_options(config, num_beams=1, n_best=3, do_sample=True, top_k=5)
    assert (sampled.n_best, sampled.candidates, sampled.settings()) == (3, 3, {
        "do_sample": True, "top_k": 5, "num_beams": 1, "num_return_sequences": 3})
    ranked = resolve_options(config, num_beams=5, n_best=3, ranked=True, keep_duplicates=True)
    assert (ranked.candidates, ranked.keep_duplicates) == (5, True)  # every beam, for the list
    assert resolve_options(config, n_best=1, ranked=True, keep_duplicates=True) == resolve_options(config)


@pytest.mark.parametrize(("asked", "limits", "field", "python", "json_field", "flags"), [
    ({"num_beams": 2, "n_best": 3}, None, "n_best",
     "`n_best` must be between 1 and the beam size (2), got 3; raise `num_beams`.",
     "must be between 1 and the beam size (2), got 3; raise num_beams.",
     "--n-best must be between 1 and the beam size (2), got 3; raise --num-beams."),
    ({"num_beams": 0}, None, "num_beams", "`num_beams` must be >= 1, got 0.", "must be >= 1, got 0.",
     "--num-beams must be >= 1, got 0."),
    ({"max_new_tokens": 0}, None, "max_new_tokens",
     "`max_new_tokens` must be >= 1 (or None for a budget from the source length), got 0.", None, None),
    ({"length_penalty": math.nan}, None, "length_penalty", "`length_penalty` must be a finite number, got nan.",
     None, None),
    ({"length_penalty": 11.0}, DecodeLimits(8, 100), "length_penalty",
     "`length_penalty` must be a finite number from -10 to 10, got 11.0.",
     "must be a finite number from -10 to 10, got 11.0.", None),
    ({"num_beams": 9}, DecodeLimits(8, 100), "num_beams", "`num_beams` must be between 1 and 8, got 9.", None, None),
    ({}, DecodeLimits(1, 100), "num_beams", "`num_beams` must be between 1 and 1, got 2.", None, None),  # default
    ({"max_new_tokens": 101}, DecodeLimits(8, 100), "max_new_tokens",
     "`max_new_tokens` must be between 1 and 100, got 101.", None, None),
    ({"no_repeat_ngram_size": -1}, None, "no_repeat_ngram_size",
     "`no_repeat_ngram_size` must be a whole number from 0 to 64, got -1.", "must be a whole number from 0 to 64, got "
     "-1.", "--no-repeat-ngram-size must be a whole number from 0 to 64, got -1."),
    ({"split_sentences": True, "scores": True}, None, "scores",
     "`scores` is not given with `split_sentences`, which gives one translation per text, put together from its "
     "sentences'; leave out `scores` or `split_sentences`.", None,
     "--scores is not given with --split-sentences, which gives one translation per text, put together from its "
     "sentences'; leave out --scores or --split-sentences."),
    ({"num_return_sequences": 2}, None, "num_return_sequences",
     "`num_return_sequences` is not an option: `translate` gives one translation per source; for several, call "
     "`translate_n_best` with `n_best`.", None, None),
])
def test_one_check_names_the_option_in_each_front_end_s_words(asked, limits, field, python, json_field,
                                                              flags) -> None:
    with pytest.raises(OptionError) as refused:
        resolve_options(GenerationConfig(**DEFAULTS), limits=limits, **asked)
    assert (refused.value.field, str(refused.value)) == (field, python)
    if json_field:
        assert refused.value.explain() == json_field
    if flags:
        assert refused.value.as_flags() == flags


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random Transformer whose generation config decodes with 2 beams, a length penalty and a budget."""
    folder = build_model_folders(tmp_path_factory.mktemp("decoding"))["transformer"]
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **DEFAULTS}))
    return folder


class FrontEnds:
    """The same model behind each front end; each method returns the options its decoding resolves to."""

    def __init__(self, folder, tmp_path, monkeypatch) -> None:
        self.folder, self.tmp_path, self.runs = folder, tmp_path, 0
        self.service = TranslationService(*load_engine(folder))
        self.resolved: list[DecodeOptions] = []
        resolve = encdec.inference.corpus.resolve_options

        def spy(*args, **kwargs) -> DecodeOptions:  # what `encdec translate` and distill decode with
            self.resolved.append(resolve(*args, **kwargs))
            return self.resolved[-1]

        monkeypatch.setattr(encdec.inference.corpus, "resolve_options", spy)

    def run_dir(self):
        self.runs += 1
        path = self.tmp_path / f"run{self.runs}"
        path.mkdir()
        (path / "original.src").write_text("3 March 2021\n")
        return path

    def cli(self, *flags: str) -> DecodeOptions:
        """`encdec translate --model DIR FLAGS`, run."""
        path = self.run_dir()
        assert main(["translate", "--model", str(self.folder), "--input", str(path / "original.src"), "--output",
                     str(path / "out.txt"), "--quiet", *flags]) == 0
        return self.resolved[-1]

    def native(self, **body) -> DecodeOptions:
        """The JSON body of the native `POST /translate`, checked by its schema and turned into jobs: the options of
        the last (with `n_best`, the n-best list's; its translation's are those asked without `n_best`)."""
        request = request_schema(self.service.limits)(text="3 March 2021", **body).model_dump()
        for name in ("source", "target", "model", "split_sentences"):  # the server takes them first
            request.pop(name)
        return self.service.jobs(**request)[-1].options

    def libretranslate(self, **body) -> tuple[DecodeOptions, DecodeOptions | None]:
        """LibreTranslate's body: the translation's options, and its alternatives'."""
        return decode_options(served_as(self.service), alternatives_of(body, self.service.limits.max_beams - 1))

    def distill(self, **teacher) -> DecodeOptions:
        """A distillation recipe's `teacher` section, the teacher translating the sources."""
        path = self.run_dir()
        config = DistillConfig(teacher=TeacherSettings(models=[str(self.folder)], **teacher), student="unused.yaml",
                               output_dir=str(path))
        translate_sources(config, path, "src")
        return self.resolved[-1]


REQUESTS = [  # (flags, JSON fields, teacher settings): one request each
    ((), {}, {}),
    (("--num-beams", "3"), {"num_beams": 3}, {"num_beams": 3}),
    (("--num-beams", "4", "--length-penalty", "0.6", "--max-new-tokens", "7"),
     {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": 7},
     {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": 7}),
    (("--num-beams", "1", "--length-penalty", "2.0"), {"num_beams": 1, "length_penalty": 2.0},
     {"num_beams": 1, "length_penalty": 2.0}),
    (("--no-repeat-ngram-size", "2"), {"no_repeat_ngram_size": 2}, {"no_repeat_ngram_size": 2}),
]


def test_every_front_end_turns_one_request_into_equal_options(folder, tmp_path, monkeypatch) -> None:
    """Distillation always scores its teacher's translations, as `--scores` and `return_scores` do."""
    ends = FrontEnds(folder, tmp_path, monkeypatch)
    for flags, body, teacher in REQUESTS:
        scored = ends.cli(*flags, "--scores")
        assert scored == ends.native(**body, return_scores=True) == ends.distill(**teacher), flags
        assert ends.cli(*flags) == ends.native(**body) == dataclasses.replace(scored, scores=False), flags
    assert ends.cli("--alignments") == ends.native(return_alignments=True)
    assert ends.cli("--num-beams", "3", "--n-best", "3").n_best == 3
    assert ends.native(n_best=3) == ends.cli("--n-best", "3")  # the model's 2 beams widened to 3 in both
    assert ends.cli("--no-repeat-ngram-size", "2").settings()["no_repeat_ngram_size"] == 2


def test_libretranslate_decodes_its_translation_as_the_others_and_its_alternatives_as_an_n_best_list(
        folder, tmp_path, monkeypatch) -> None:
    """The translation: the default options whatever `alternatives`; the alternatives: `encdec translate --n-best
    K+1`'s list (which widens the model's 2 beams to K+1). The native API's `n_best` list is `encdec translate
    --n-best`'s too (`keep_duplicates` as `--keep-duplicates`), its translation the one asked without `n_best`."""
    ends = FrontEnds(folder, tmp_path, monkeypatch)
    default = ends.cli()
    assert ends.libretranslate(q="x") == (default, None) and ends.native() == default
    main_options, alternatives = ends.libretranslate(q="x", alternatives=2)
    assert main_options == default
    assert alternatives == ends.cli("--n-best", "3")
    assert (alternatives.num_beams, alternatives.n_best, alternatives.ranked) == (3, 3, True)
    assert ends.libretranslate(q="x", alternatives=1)[1] == ends.cli("--n-best", "2")  # the model's 2 beams
    assert ends.native(num_beams=3, n_best=3) == ends.cli("--num-beams", "3", "--n-best", "3")
    assert ends.native(num_beams=3, n_best=3, keep_duplicates=True) == ends.cli("--num-beams", "3", "--n-best", "3",
                                                                                 "--keep-duplicates")
    translation, listed = ends.service.jobs(text="3 March 2021", num_beams=3, n_best=3)
    assert translation.options == ends.cli("--num-beams", "3") and listed.n_best_list


def test_the_command_line_names_the_flag_of_an_option_out_of_range(folder, tmp_path, capsys) -> None:
    source = tmp_path / "in.txt"
    source.write_text("3 March 2021\n")
    assert main(["translate", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "out.txt"),
                 "--n-best", "3", "--num-beams", "2", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "encdec translate: error: --n-best must be between 1 and the beam size (2), got 3; raise --num-beams.")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]  # refused before any chunk: nothing left


def test_resolving_widens_a_default_beam_for_an_n_best_list_and_says_so() -> None:
    """The one rule for `encdec translate --n-best`, the native `n_best` and LibreTranslate's alternatives: K
    hypotheses need K beams; a beam size left to the model is widened (and said), an asked one is kept."""
    config = GenerationConfig(**DEFAULTS)
    widened = resolve_options(config, n_best=3)
    assert (widened.num_beams, widened.n_best) == (3, 3)
    assert widened.said(lambda name: "--" + name.replace("_", "-")) == [
        "--n-best 3 needs 3 beams; the model decodes with 2 by default, so this run uses --num-beams 3."]
    assert resolve_options(config, n_best=2).notes == () and resolve_options(config, n_best=2).num_beams == 2
    assert resolve_options(config, num_beams=1, n_best=3, do_sample=True).num_beams == 1  # sampling draws 3
    assert resolve_options(config).describe() == {"num_beams": 2, "length_penalty": 0.7, "max_new_tokens": 9,
                                                  "no_repeat_ngram_size": 0}
    assert resolve_options(config, num_beams=1).describe()["length_penalty"] == 0.7  # what beam search would use


def repeated_ngrams(ids: list[int], n: int) -> int:
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


@pytest.mark.parametrize("num_beams", [1, 2])
def test_no_repeat_ngram_size_leaves_no_n_gram_twice(folder, num_beams, tmp_path) -> None:
    """A tiny random model repeats itself over a long budget; with `no_repeat_ngram_size` 2 (the Python API's
    keyword, the command line's flag) no bigram of an output occurs twice; greedy outputs change only there."""
    engine, tokenizer = load_engine(folder)
    sources = ["3 March 2021", "Wednesday, 3 Mar 2021", "2021-03-03", "March 3rd"]
    asked = {"num_beams": num_beams, "max_new_tokens": 24}
    free = [ids for [ids] in translate_n_best_ids(engine, tokenizer, sources, 1, **asked)[1]]
    kept = [ids for [ids] in translate_n_best_ids(engine, tokenizer, sources, 1, no_repeat_ngram_size=2, **asked)[1]]
    assert sum(repeated_ngrams(ids, 2) for ids in free) > 0  # so that the option has something to do
    assert all(repeated_ngrams(ids, 2) == 0 for ids in kept)
    if num_beams == 1:  # greedy search: an output without a repeated bigram never met a banned token
        assert [a for a, b in zip(free, kept, strict=True) if a != b] == [ids for ids in free
                                                                          if repeated_ngrams(ids, 2)]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sources) + "\n")
    assert main(["translate", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "out.txt"),
                 "--num-beams", str(num_beams), "--max-new-tokens", "24", "--no-repeat-ngram-size", "2",
                 "--quiet"]) == 0
    assert (tmp_path / "out.txt").read_text().splitlines() == translate(engine, tokenizer, sources,
                                                                        no_repeat_ngram_size=2, **asked)


def test_an_option_a_front_end_does_not_offer_is_named(folder, tmp_path) -> None:
    with pytest.raises(OptionError, match="^`n_best` is not an option of evaluate_model; it takes num_beams, "
                                          "max_new_tokens, length_penalty, no_repeat_ngram_size, glossary, "
                                          "source_lang, target_lang.$"):
        evaluate_model(folder, tmp_path / "in.txt", tmp_path / "ref.txt", n_best=2)
