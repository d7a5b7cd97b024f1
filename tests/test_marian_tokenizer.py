"""An imported Marian model's tokenizer (``encdec.marian.tokenizer.build_marian_tokenizer``) against transformers' own
``MarianTokenizer`` on the same folder: the same ids for sources and targets (``text_target=``), padded batches and
texts with characters one side lacks, the same decoded texts, loading again with and without encdec, a vocabulary
with target-language tokens, and a one-line error for each folder it cannot reproduce.

The folders are written by ``marian_fixtures.write_marian_tokenizer``: two tiny SentencePiece models trained here,
on the built-in date task, with one source piece left out of ``vocab.json``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

pytest.importorskip("sentencepiece")  # the reference MarianTokenizer and the trainer of the test's models

from transformers import AutoTokenizer, MarianTokenizer  # noqa: E402

from encdec import MarianImportTokenizer  # noqa: E402
from encdec.errors import InputFileError  # noqa: E402
from encdec.marian.tokenizer import build_marian_tokenizer  # noqa: E402
from marian_fixtures import (  # noqa: E402
    HELD_OUT_SOURCES,
    HELD_OUT_TARGETS,
    SOURCE_LINES,
    train_spm,
    write_marian_tokenizer,
)
from remote_code import BLOCK_ENCDEC  # noqa: E402

# what a user types that the dates never had: characters only the other side's model knows (ä, é, û are German and
# French), none knows (ß, 日本), that the normalizer maps (full width, a ligature, no-break space), special tokens
# and language codes typed in the text, spaces at the ends and in runs, nothing at all
EDGE_TEXTS = ["", " ", "  double  spaces ", "the </s> inside", "</s>", "<unk>", "a<unk>b", "<pad> x",
              "März 2021 août", "Wednesday, 3 März", "unseen Ünïcödé ß 日本", "ＦＵＬＬwidth １２", "ﬁve\u00a0May",
              "äöü", "\ue000März", "tab\tand\nnewline", ">>xyz<< Jan 3", ">> not <<", "<unk>>>fr<<1999", "▁lit"]
TEXTS = HELD_OUT_SOURCES + HELD_OUT_TARGETS + EDGE_TEXTS


def reference(folder: Path) -> MarianTokenizer:
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses.", for a normalizer it never calls
        warnings.simplefilter("ignore")
        return MarianTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module", params=["two models", "one model"])
def pair(request, tmp_path_factory) -> tuple[MarianTokenizer, MarianImportTokenizer]:
    """(MarianTokenizer, ours) on a folder with different source and target models, or one model twice."""
    folder = write_marian_tokenizer(tmp_path_factory.mktemp("marian"), one_model=request.param == "one model")
    return reference(folder), build_marian_tokenizer(folder)[0]


@pytest.mark.parametrize("side", ["source", "target"])
def test_each_text_gets_marian_tokenizers_ids(pair, side: str) -> None:
    marian, ours = pair
    key = "text" if side == "source" else "text_target"
    for text in TEXTS:
        assert ours(**{key: text})["input_ids"] == marian(**{key: text})["input_ids"], text


def test_a_padded_batch_with_labels_is_marian_tokenizers(pair) -> None:
    marian, ours = pair
    expected = marian(TEXTS, text_target=TEXTS[::-1], padding=True, return_tensors="pt")
    got = ours(TEXTS, text_target=TEXTS[::-1], padding=True, return_tensors="pt")
    assert set(got) == set(expected) == {"input_ids", "attention_mask", "labels"}
    for key in expected:
        assert got[key].tolist() == expected[key].tolist(), key
    assert ours(TEXTS[0], return_tensors="pt")["input_ids"].tolist() == marian(TEXTS[0], return_tensors="pt")[
        "input_ids"].tolist()


@pytest.mark.parametrize("skip_special_tokens", [False, True])
def test_decoding_is_marian_tokenizers(pair, skip_special_tokens: bool) -> None:
    """Every encoded text and random id sequences (any piece of either side, special tokens between them)."""
    marian, ours = pair
    rng = random.Random(0)
    sequences = [marian(text_target=text)["input_ids"] for text in TEXTS] + [
        [rng.randrange(marian.vocab_size) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    for ids in sequences:
        assert ours.decode(ids, skip_special_tokens=skip_special_tokens) == marian.decode(
            ids, skip_special_tokens=skip_special_tokens), ids
    assert ours.batch_decode(sequences, use_source_tokenizer=False) == marian.batch_decode(
        sequences, use_source_tokenizer=False)


def test_the_vocabulary_is_vocab_json(pair) -> None:
    """Marian's ids and sizes: the pieces vocab.json lacks are counted, encoded as <unk> and no token of the model."""
    marian, ours = pair
    assert ours.get_vocab() == marian.get_vocab()
    assert len(ours) == ours.vocab_size == len(marian)
    assert (ours.eos_token_id, ours.unk_token_id, ours.pad_token_id) == (0, 1, len(marian) - 1)
    ids = marian("x")["input_ids"] + list(range(len(marian)))
    assert ours.convert_ids_to_tokens(ids) == marian.convert_ids_to_tokens(ids)


def test_the_missing_piece_is_counted(tmp_path: Path) -> None:
    assert build_marian_tokenizer(write_marian_tokenizer(tmp_path / "one-dropped"))[1] == 1
    assert build_marian_tokenizer(write_marian_tokenizer(tmp_path / "none-dropped", drop=0))[1] == 0


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[MarianImportTokenizer, Path]:
    """Our tokenizer and the folder its ``save_pretrained`` wrote (two models, so two backends)."""
    ours = build_marian_tokenizer(write_marian_tokenizer(tmp_path_factory.mktemp("marian-source")))[0]
    folder = tmp_path_factory.mktemp("marian-saved")
    ours.save_pretrained(folder)
    return ours, folder


def test_a_saved_tokenizer_loads_again_with_encdec(saved) -> None:
    ours, folder = saved
    assert sorted(os.listdir(folder)) == ["target_tokenizer.json", "tokenization_marian_import.py", "tokenizer.json",
                                          "tokenizer_config.json"]
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert settings["tokenizer_class"] == "MarianImportTokenizer"
    assert settings["auto_map"]["AutoTokenizer"][0] == "tokenization_marian_import.MarianImportTokenizer"
    loaded = AutoTokenizer.from_pretrained(folder)
    assert type(loaded) is MarianImportTokenizer
    assert loaded(TEXTS)["input_ids"] == ours(TEXTS)["input_ids"]
    assert loaded(text_target=TEXTS)["input_ids"] == ours(text_target=TEXTS)["input_ids"]


# Loads a saved folder's tokenizer as a machine without encdec does, and writes what it encodes and decodes.
WITHOUT_ENCDEC = BLOCK_ENCDEC + textwrap.dedent(
    """
    import json

    from transformers import AutoTokenizer

    folder, texts = sys.argv[1], json.loads(sys.argv[2])
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    targets = tokenizer(text_target=texts)["input_ids"]
    print(json.dumps({"class": [type(tokenizer).__name__, type(tokenizer).__module__],
                      "sources": tokenizer(texts)["input_ids"], "targets": targets,
                      "decoded": tokenizer.batch_decode(targets, skip_special_tokens=True)}))
    """
)


@pytest.mark.integration  # a fresh Python process, transformers imported anew
def test_a_saved_tokenizer_loads_where_encdec_is_not_installed(saved, tmp_path: Path) -> None:
    ours, folder = saved
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": "",
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", WITHOUT_ENCDEC, str(folder), json.dumps(TEXTS)], cwd=tmp_path,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    remote = json.loads(done.stdout)
    name, module = remote["class"]
    assert name == "MarianImportTokenizer" and module.startswith("transformers_modules."), module
    assert remote["sources"] == ours(TEXTS)["input_ids"]
    assert remote["targets"] == ours(text_target=TEXTS)["input_ids"]
    assert remote["decoded"] == ours.batch_decode(remote["targets"], skip_special_tokens=True)


def test_target_language_tokens_start_the_source(tmp_path: Path) -> None:
    """A multilingual-target vocabulary: ``>>fra<<`` typed first, or put there by ``tgt_lang``, as OPUS-MT's
    models read it; the targets get none."""
    folder = write_marian_tokenizer(tmp_path / "multi", languages=["fra", "deu"])
    marian, ours = reference(folder), build_marian_tokenizer(folder)[0]
    assert ours.target_language_tokens == {"fra": ">>fra<<", "deu": ">>deu<<"}
    assert not hasattr(ours, "language_tokens")  # not encdec's multilingual convention: the token is typed
    typed = [f">>{code}<< {text}" for code in ("fra", "deu") for text in HELD_OUT_SOURCES[:4]] + [">>fra<<"]
    assert ours(typed)["input_ids"] == marian(typed)["input_ids"]
    ours.tgt_lang = "fra"
    sources = HELD_OUT_SOURCES + [">>deu<< 3 May 2001"]  # a code already there is kept
    assert ours(sources)["input_ids"] == marian([f">>fra<< {text}" for text in sources[:-1]] + sources[-1:])[
        "input_ids"]
    assert ours(text_target=HELD_OUT_TARGETS)["input_ids"] == marian(text_target=HELD_OUT_TARGETS)["input_ids"]
    ours.save_pretrained(tmp_path / "saved")
    assert AutoTokenizer.from_pretrained(tmp_path / "saved").tgt_lang == "fra"
    with pytest.raises(ValueError, match=r"Unknown target language 'ita'.*fra, deu"):
        ours.tgt_lang = "ita"


def vocab_without(token: str):
    def edit(folder: Path) -> None:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        tokens = [other for other in sorted(vocab, key=vocab.get) if other != token]
        (folder / "vocab.json").write_text(json.dumps({other: i for i, other in enumerate(tokens)}),
                                           encoding="utf-8")
    return edit


def spm_file(name: str, data):
    return lambda folder: (folder / name).write_bytes(data() if callable(data) else data)


BAD_FOLDERS = {
    "no source.spm": (lambda folder: (folder / "source.spm").unlink(), r"source\.spm \(a SentencePiece model\) is "
                      r"missing"),
    "no target.spm": (lambda folder: (folder / "target.spm").unlink(), r"target\.spm \(a SentencePiece model\) is "
                      r"missing"),
    "no vocab.json": (lambda folder: (folder / "vocab.json").unlink(), r"vocab\.json \(the vocabulary\) is missing"),
    "no </s>": (vocab_without("</s>"), r"vocab\.json \(the vocabulary\) lacks the special tokens \['</s>'\]"),
    "no <unk>": (vocab_without("<unk>"), r"vocab\.json \(the vocabulary\) lacks the special tokens \['<unk>'\]"),
    "no <pad>": (vocab_without("<pad>"), r"vocab\.json \(the vocabulary\) lacks the special tokens \['<pad>'\]"),
    "truncated": (lambda folder: (folder / "target.spm").write_bytes((folder / "target.spm").read_bytes()[:-9]),
                  r"target\.spm is not a SentencePiece model .*truncated"),
    "cut in half": (lambda folder: (folder / "source.spm").write_bytes((folder / "source.spm").read_bytes()[:900]),
                    r"source\.spm is not a SentencePiece model .*truncated"),
    "garbage": (spm_file("source.spm", b"MODEL\x00\xff" * 40), r"source\.spm is not a SentencePiece model"),
    "byte fallback": (spm_file("source.spm", lambda: train_spm(SOURCE_LINES, vocab_size=340, byte_fallback=True)),
                      r"source\.spm is a SentencePiece model with `byte_fallback: true`"),
    "bpe": (spm_file("target.spm", lambda: train_spm(SOURCE_LINES, model_type="bpe")),
            r"target\.spm is a SentencePiece `model_type: bpe` model; encdec imports unigram models"),
    "separate vocabularies": (lambda folder: (folder / "tokenizer_config.json").write_text(
        json.dumps({"separate_vocabs": True}), encoding="utf-8"), r"tokenizer_config\.json sets `separate_vocabs: "
                              r"true`.*one joint vocabulary"),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_a_folder_it_cannot_reproduce_is_one_line_naming_the_file(case: str, tmp_path: Path) -> None:
    break_folder, message = BAD_FOLDERS[case]
    folder = write_marian_tokenizer(tmp_path / "bad")
    break_folder(folder)
    with pytest.raises(InputFileError, match=message) as raised:
        build_marian_tokenizer(folder)
    assert "\n" not in str(raised.value)
