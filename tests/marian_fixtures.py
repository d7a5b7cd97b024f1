"""Marian folders built in the test, as transformers' ``MarianTokenizer`` reads them (and OPUS-MT ships them).

``write_marian_tokenizer`` trains two tiny unigram SentencePiece models on the built-in date task (the one ``make
demo`` uses: dates in English formats for the source; German and French running-text dates for the target, so that
each side has characters the other lacks) and writes ``source.spm``, ``target.spm``, a joint ``vocab.json`` in
Marian's layout (``</s>`` 0, ``<unk>`` 1, the pieces, ``<pad>`` last) and ``tokenizer_config.json``. The test needs
``sentencepiece`` (the ``dev`` extra) to train them.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel

from encdec.data.dates import DATE_RANGE, make_date_pairs, write_date

SOURCE_LINES = [source for source, _ in make_date_pairs(400, seed=1)]
# held-out dates: another seed, so most are texts the models were not trained on
HELD_OUT_SOURCES = [source for source, _ in make_date_pairs(12, seed=7)]


def target_lines(n: int, seed: int) -> list[str]:
    """``n`` dates as German and French write them (``3. März 2021``, ``1er août 1999``)."""
    rng = random.Random(seed)
    return [write_date(dt.date.fromordinal(rng.randint(*DATE_RANGE)), rng.choice(["de", "fr"])) for _ in range(n)]


TARGET_LINES = target_lines(400, seed=1)
HELD_OUT_TARGETS = target_lines(12, seed=7)


def train_spm(lines: Sequence[str], vocab_size: int = 80, **options) -> bytes:
    """A unigram SentencePiece model (Marian's settings: ``</s>`` 0, ``<unk>`` 1, no ``<s>`` or pad piece) trained
    on ``lines``, as the bytes of its ``.spm`` file; ``options`` go to the trainer (``byte_fallback=True``...)."""
    import sentencepiece as spm

    model = io.BytesIO()
    settings = dict(model_type="unigram", vocab_size=vocab_size, character_coverage=1.0, unk_id=1, bos_id=-1,
                    eos_id=0, pad_id=-1, minloglevel=2, num_threads=1)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, **{**settings, **options})
    return model.getvalue()


def spm_pieces(model: bytes) -> list[str]:
    """The normal pieces of a SentencePiece model, in its order."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def write_marian_tokenizer(folder: Path, *, languages: Sequence[str] = (), drop: int = 1, one_model: bool = False,
                           source: bytes | None = None, target: bytes | None = None, seed: int = 0) -> Path:
    """A Marian tokenizer folder in ``folder`` (created): ``source.spm``, ``target.spm``, ``vocab.json`` and
    ``tokenizer_config.json``. Returns ``folder``.

    Args:
        languages: target-language codes whose ``>>code<<`` tokens the vocabulary holds (a multilingual model's).
        drop: how many source pieces ``vocab.json`` leaves out (``MarianTokenizer`` encodes them as ``<unk>``).
        one_model: both sides use the source model (byte-identical files), as some OPUS-MT pairs do.
        source, target: ``.spm`` bytes to write instead of the trained ones (a bad model, for the error tests).
        seed: the order of the pieces in ``vocab.json`` (Marian's ids are not SentencePiece's).
    """
    folder.mkdir(parents=True, exist_ok=True)
    source_model, target_model = train_spm(SOURCE_LINES), train_spm(TARGET_LINES)
    if one_model:
        target_model = source_model
    pieces = list(dict.fromkeys(spm_pieces(source_model) + spm_pieces(target_model)))
    random.Random(seed).shuffle(pieces)
    # left out: whole-word source pieces only the source model has, so held-out texts meet them
    dropped = [piece for piece in pieces if piece.startswith("\u2581") and len(piece) > 3
               and piece not in spm_pieces(target_model)][:drop]
    tokens = ["</s>", "<unk>", *(f">>{code}<<" for code in languages),
              *(piece for piece in pieces if piece not in dropped), "<pad>"]
    (folder / "source.spm").write_bytes(source if source is not None else source_model)
    (folder / "target.spm").write_bytes(target if target is not None else target_model)
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(tokens)}, ensure_ascii=False),
                                       encoding="utf-8")
    settings = {"source_lang": "en", "target_lang": "mul" if languages else "de", "model_max_length": 512,
                "separate_vocabs": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


CARD = "---\nlicense: cc-by-4.0\nlanguage:\n- en\n- de\n---\n\n# a tiny Marian model built by the test\n"


def write_marian_model(folder: Path, seed: int = 0, languages: Sequence[str] = (), **config) -> Path:
    """A Marian model folder as OPUS-MT ships one: the tokenizer files, config.json, generation_config.json and
    model.safetensors of a random MarianMTModel (swish, scaled embeddings, a non-zero logits bias) and a card."""
    write_marian_tokenizer(folder, languages=languages)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    pad = vocab["<pad>"]
    settings = dict(vocab_size=len(vocab), d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                    decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=128,
                    pad_token_id=pad, eos_token_id=vocab["</s>"], decoder_start_token_id=pad,
                    activation_function="swish", scale_embedding=True, dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**settings, **config})).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.normal_(0.0, 0.3)
        model.final_logits_bias.normal_(0.0, 0.5)
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]], max_length=24, num_beams=3, decoder_start_token_id=pad, eos_token_id=vocab["</s>"],
        forced_eos_token_id=vocab["</s>"], pad_token_id=pad)
    model.save_pretrained(folder)
    (folder / "README.md").write_text(CARD, encoding="utf-8")
    return folder
