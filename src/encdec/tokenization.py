"""Train and load the joint source/target subword vocabulary with the `tokenizers` library.

The result is a ``PreTrainedTokenizerFast`` (saved as a folder that ``AutoTokenizer.from_pretrained`` loads),
with ``<pad>``, ``<s>``, ``</s>`` and ``<unk>`` at ids 0-3 and ``</s>`` appended to every encoded text.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
ALGORITHMS = ("bpe", "unigram")
PRE_TOKENIZERS = ("metaspace", "whitespace_punct")


def build_normalizer() -> normalizers.Normalizer:
    """NFKC, then every no-break space and tab becomes a plain space, runs of spaces collapse, ends trimmed."""
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.Replace(Regex(r"[\u00a0\u202f\t]"), " "),
        normalizers.Replace(Regex(r" {2,}"), " "),
        normalizers.Strip(),
    ])


def build_pre_tokenizer(name: str) -> tuple[pre_tokenizers.PreTokenizer, decoders.Decoder]:
    """``metaspace`` keeps spaces as ``▁`` so decoding restores the exact text (SentencePiece style);
    ``whitespace_punct`` also splits punctuation off words, and decodes through the same ``▁`` markers."""
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    if name == "metaspace":
        return metaspace, decoders.Metaspace(replacement="▁", prepend_scheme="always")
    if name == "whitespace_punct":
        split = pre_tokenizers.Punctuation(behavior="isolated")
        return pre_tokenizers.Sequence([metaspace, split]), decoders.Metaspace(replacement="▁", prepend_scheme="always")
    raise ValueError(f"`pre_tokenizer` must be one of {list(PRE_TOKENIZERS)}, got {name!r}.")


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    algorithm: str = "bpe",
    pre_tokenizer: str = "metaspace",
    min_frequency: int = 2,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train one vocabulary over source and target texts together (a joint vocabulary, so the embedding
    matrices can be tied) and wrap it as a ``PreTrainedTokenizerFast``.

    :param texts: every source and target sentence of the training split
    :param algorithm: ``"bpe"`` (Sennrich et al. 2016) or ``"unigram"`` (Kudo 2018)
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"`algorithm` must be one of {list(ALGORITHMS)}, got {algorithm!r}.")
    specials = list(SPECIAL_TOKENS.values())  # ids 0..3, in this order
    if algorithm == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                      show_progress=False)
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                          unk_token=SPECIAL_TOKENS["unk_token"], show_progress=False)
    tokenizer.normalizer = build_normalizer()
    tokenizer.pre_tokenizer, tokenizer.decoder = build_pre_tokenizer(pre_tokenizer)
    texts = list(texts)
    if not any(t.strip() for t in texts):
        raise ValueError("Cannot train a tokenizer on empty data: every text is blank.")
    tokenizer.train_from_iterator(texts, trainer=trainer)
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length, **SPECIAL_TOKENS)


def special_token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    """The ids a model config takes from its tokenizer: vocabulary size and the special tokens."""
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id,
    }


def check_tokenizer_matches_model(tokenizer: PreTrainedTokenizerFast, config) -> None:
    """Raise a clear error when a tokenizer and a model config disagree on the vocabulary."""
    expected = special_token_ids(tokenizer)
    for key, value in expected.items():
        model_value = getattr(config, key, None)
        mismatch = model_value < value if key == "vocab_size" else model_value != value
        if mismatch:
            raise ValueError(
                f"Tokenizer and model disagree on `{key}`: tokenizer has {value}, model config has {model_value}. "
                "Use the tokenizer the model was trained with, or rebuild the model config from this tokenizer."
            )
