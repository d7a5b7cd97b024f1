"""The tests' toy task and tiny models, in one place.

The toy task: reverse a sequence of digits. Ids 0-2 are PAD, BOS and EOS, ids 3-12 the digits 0-9
(``TOY_VOCAB_SIZE`` = 13); a source is the digits, the target the digits reversed, then EOS. It comes as unpadded
examples (``toy_examples``, for datasets and Trainer) or as right-padded tensors (``toy_batch``); the two draw
from their generator in a different order (one length, then its digits, example by example; or all the lengths
first), so each keeps the data its tests were written for. ``train_loop`` is the plain training loop of the tests,
``train_on_toy_task`` that loop on fresh toy batches.

The model-invariant tests use random tokens instead of digits: ``source_batch`` and ``target_batch`` draw ids 3-22
(``RANDOM_VOCAB_SIZE`` = 23) from a fixed seed.

The tiny models are model-config dicts (``TINY_MODELS`` and those derived from it) and one builder,
``tiny_model``: ``toy_model`` adds the toy vocabulary, ``folder_model`` a tokenizer's, ``rnn_variant`` builds the
RNN variants of the invariant tests (``RNN_VARIANTS``) and ``trained_rnn_variant`` trains one for a moment.
``MARIAN_SWITCHES``, ``MARIAN_IDS`` and ``MARIAN_GENERATION`` are what `encdec import` gives a Marian model (swish, a
logits bias, no <s>); ``random_logits_bias`` fills the bias, ``trained_marian_like`` trains such a model on the toy
task for the export and engine tests.

Imported by the test files, by conftest.py (which serves some of this as fixtures) and by distributed_worker.py
(run as a script, with tests/ on the path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

import encdec  # noqa: F401  (registers the Auto classes)
from encdec.tokenization import special_token_ids

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # input_ids, attention_mask, labels

# --- the toy task: reverse a digit sequence --------------------------------------------------------------------------

PAD, BOS, EOS = 0, 1, 2
FIRST_DIGIT = 3  # ids 3..12 are the digits 0..9
TOY_VOCAB_SIZE = FIRST_DIGIT + 10
RANDOM_VOCAB_SIZE = 23  # source_batch and target_batch: random ids 3..22
TOY_IDS = {"pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": EOS, "decoder_start_token_id": BOS}


def right_pad(rows: Sequence[Sequence[int]], value: int = PAD, width: int | None = None) -> torch.Tensor:
    """The rows as one (len(rows), width) tensor, filled with ``value`` on the right; ``width``: the longest row's."""
    width = max(len(row) for row in rows) if width is None else width
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out


def toy_labels(sources: Sequence[list[int]], reverse: bool = True) -> torch.Tensor:
    """Labels (B, longest source + 1): each source reversed (or as it is), then EOS, then -100."""
    return right_pad([(source[::-1] if reverse else source) + [EOS] for source in sources], value=-100)


def toy_examples(n: int, seed: int = 0, min_len: int = 3, max_len: int = 8,
                 source_eos: bool = True) -> list[dict[str, list[int]]]:
    """``n`` unpadded examples: input_ids (the digits, then EOS unless ``source_eos`` is false) and labels (the
    digits reversed, then EOS). Each example draws its length, then its digits."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        digits = torch.randint(FIRST_DIGIT, TOY_VOCAB_SIZE, (length,), generator=generator).tolist()
        examples.append({"input_ids": digits + [EOS] if source_eos else digits, "labels": digits[::-1] + [EOS]})
    return examples


def collate(examples: Sequence[Mapping[str, Sequence[int]]]) -> dict[str, torch.Tensor]:
    """Right-pad examples: input_ids (B, S), attention_mask (B, S), labels (B, T) with -100 padding."""
    sources = [example["input_ids"] for example in examples]
    return {"input_ids": right_pad(sources), "attention_mask": right_pad([[1] * len(s) for s in sources], value=0),
            "labels": right_pad([example["labels"] for example in examples], value=-100)}


def toy_batch(n: int, generator: torch.Generator, min_len: int = 3, max_len: int = 8, reverse: bool = True) -> Batch:
    """``n`` right-padded examples, all lengths drawn first: input_ids and attention_mask (n, S) with the digits
    (no EOS), labels (n, S + 1) with the digits reversed (or, with ``reverse=False``, copied), EOS, then -100."""
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator).tolist()
    sources = [torch.randint(FIRST_DIGIT, TOY_VOCAB_SIZE, (length,), generator=generator).tolist()
               for length in lengths]
    input_ids = right_pad(sources)
    return input_ids, (input_ids != PAD).long(), toy_labels(sources, reverse)


def source_batch(lengths: Sequence[int] = (5, 3, 7), extra_padding: int = 0, seed: int = 1
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random sources (ids 3..22): input_ids and attention_mask (B, max(lengths) + extra_padding)."""
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randint(FIRST_DIGIT, RANDOM_VOCAB_SIZE, (length,), generator=generator).tolist()
            for length in lengths]
    input_ids = right_pad(rows, width=max(lengths) + extra_padding)
    return input_ids, (input_ids != PAD).long()


def target_batch(batch_size: int, length: int, seed: int = 2) -> torch.Tensor:
    """Random target ids 3..22, (batch_size, length)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_DIGIT, RANDOM_VOCAB_SIZE, (batch_size, length), generator=generator)


def exact_match(generated: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of rows whose output (after the start token, up to the first EOS) equals the label sequence."""
    hits = 0
    for row, label in zip(generated.tolist(), labels.tolist(), strict=True):
        tokens = row[1:]
        tokens = tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens
        hits += tokens == [t for t in label if t != -100]
    return hits / len(labels)


def digit_tokenizer(bos: bool = True) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the toy vocabulary, built in memory: "3 1 4" -> [6, 4, 7]. ``bos`` False: no
    ``<s>`` token (id 1 is then an ordinary one), as Marian's vocabularies have none (``MARIAN_IDS``)."""
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS, **{str(d): FIRST_DIGIT + d for d in range(10)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>" if bos else None,
                                   eos_token="</s>")


# --- training ---------------------------------------------------------------------------------------------------------

def linear_schedule(steps: int, warmup: int = 0, decay: int | None = None) -> Callable[[int], float]:
    """The learning-rate factor of each step: a linear warm-up over ``warmup`` steps, flat, then a linear decay to 0
    over the last ``decay`` steps (by default all those after the warm-up)."""
    decay = steps - warmup if decay is None else decay
    return lambda step: min(1.0, (step + 1) / max(warmup, 1), (steps - step) / max(decay, 1))


@torch.enable_grad()
def train_loop(model: PreTrainedModel, batches: Iterable[Batch], lr: float,
               optimizer: type[torch.optim.Optimizer] = torch.optim.AdamW,
               schedule: Callable[[int], float] | None = None, max_grad_norm: float | None = 1.0) -> list[float]:
    """Train ``model`` (in train mode) one step per batch: ``optimizer`` at ``lr`` times ``schedule(step)``,
    gradients clipped to ``max_grad_norm`` (None: not clipped). Returns the losses."""
    optimizer = optimizer(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule) if schedule else None
    model.train()
    losses = []
    for input_ids, attention_mask, labels in batches:
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        if scheduler:
            scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def train_on_toy_task(model: PreTrainedModel, steps: int, batch_size: int, lr: float, seed: int = 0,
                      warmup: int = 0, decay: int | None = None,
                      optimizer: type[torch.optim.Optimizer] = torch.optim.AdamW,
                      exclude: set[tuple[int, ...]] | None = None, min_len: int = 3, max_len: int = 8,
                      reverse: bool = True) -> list[float]:
    """``train_loop`` on ``steps`` fresh ``toy_batch``es from ``seed``, under ``linear_schedule(steps, warmup,
    decay)``; returns the losses. ``exclude``: padded source rows (as tuples) never to train on, e.g. a held-out
    set."""
    generator = torch.Generator().manual_seed(seed)

    def batches() -> Iterator[Batch]:
        for _ in range(steps):
            input_ids, attention_mask, labels = toy_batch(batch_size, generator, min_len, max_len, reverse)
            if exclude:
                keep = torch.tensor([tuple(row) not in exclude for row in input_ids.tolist()])
                input_ids, attention_mask, labels = input_ids[keep], attention_mask[keep], labels[keep]
            yield input_ids, attention_mask, labels

    return train_loop(model, batches(), lr, optimizer, linear_schedule(steps, warmup, decay))


# --- tiny models ------------------------------------------------------------------------------------------------------

# each family's tiny model as a model-config JSON: the run configs of the CLI, training and distributed tests
TINY_MODELS: dict[str, dict[str, Any]] = {
    "transformer": {"model_type": "transformer_seq2seq", "d_model": 16, "encoder_layers": 1, "decoder_layers": 1,
                    "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 32,
                    "decoder_ffn_dim": 32, "dropout": 0.0, "max_position_embeddings": 64},
    "rnn": {"model_type": "rnn_seq2seq", "cell_type": "lstm", "attention": "bahdanau", "embedding_dim": 16,
            "hidden_size": 16, "encoder_layers": 1, "decoder_layers": 1, "bidirectional_encoder": True,
            "bridge": "linear_tanh", "dropout": 0.0},
}
# two layers a side: the distributed worker's Transformer and, over a vocabulary of 24 and the toy special ids, the
# model tests' (tiny_transformer_config, conftest's make_transformer)
TWO_LAYER_TRANSFORMER = {**TINY_MODELS["transformer"], "encoder_layers": 2, "decoder_layers": 2}
TEST_TRANSFORMER = {**TWO_LAYER_TRANSFORMER, "vocab_size": 24, **TOY_IDS}
# the random folders of the workflow tests (tiny_model_folders.py, folder_model): unequal Transformer layer counts
# (test_hub reads "1 encoder, 2 decoder" on the model card), a unidirectional RNN encoder
FOLDER_MODELS = {"transformer": {**TINY_MODELS["transformer"], "decoder_layers": 2},
                 "rnn": {**TINY_MODELS["rnn"], "bidirectional_encoder": False, "bridge": "last"}}
# Marian's (OPUS-MT's) Transformer as `encdec import` converts it: post-LN, swish FFN, sqrt(d) embedding scaling, the
# sines-then-cosines table and an output bias, over a vocabulary without <s>: the decoder starts from the pad token
MARIAN_SWITCHES = {"normalize_before": False, "activation_function": "swish", "scale_embedding": True,
                   "sinusoid_layout": "half_split", "final_logits_bias": True}
MARIAN_IDS = {**TOY_IDS, "bos_token_id": None, "decoder_start_token_id": PAD}
# and its generation rules, as the import keeps them: the pad token is never generated, </s> ends a full budget
MARIAN_GENERATION = {"bad_words_ids": [[PAD]], "forced_eos_token_id": EOS}
# the RNN of the invariant tests, one per RNN_VARIANTS entry (the "last" bridge where a variant names none), over
# random ids
VARIANT_RNN = {**TINY_MODELS["rnn"], "embedding_dim": 8, "hidden_size": 12, "encoder_layers": 2, "decoder_layers": 2,
               "bridge": "last", "init_range": 0.4, "vocab_size": RANDOM_VOCAB_SIZE}
# (id, config overrides): every attention with both cells, every bridge, the fused Luong path (no input feeding),
# unequal layer counts, a unidirectional encoder and weight tying (with and without the output projection)
RNN_VARIANTS: dict[str, dict[str, Any]] = {
    "none-lstm": dict(attention="none", cell_type="lstm", bridge="last"),
    "none-gru-1to2": dict(attention="none", cell_type="gru", bridge="linear_tanh", encoder_layers=1),
    "none-context-lstm": dict(attention="none", context_feeding=True, cell_type="lstm", bridge="linear_tanh"),
    "none-context-gru-unidirectional": dict(attention="none", context_feeding=True, cell_type="gru",
                                            bidirectional_encoder=False, bridge="last"),
    "bahdanau-lstm": dict(attention="bahdanau", cell_type="lstm", bridge="linear_tanh"),
    "bahdanau-gru": dict(attention="bahdanau", cell_type="gru", bridge="zero"),
    "luong_dot-lstm": dict(attention="luong_dot", cell_type="lstm", bridge="last"),
    "luong_dot-gru": dict(attention="luong_dot", cell_type="gru", bridge="linear_tanh"),
    "luong_general-lstm": dict(attention="luong_general", cell_type="lstm", bridge="zero"),
    "luong_general-gru": dict(attention="luong_general", cell_type="gru", bridge="last"),
    "luong_concat-lstm": dict(attention="luong_concat", cell_type="lstm", bridge="linear_tanh"),
    "luong_concat-gru": dict(attention="luong_concat", cell_type="gru", bridge="last"),
    "luong_dot-nofeed-lstm": dict(attention="luong_dot", cell_type="lstm", input_feeding=False),
    "luong_general-nofeed-gru": dict(attention="luong_general", cell_type="gru", input_feeding=False),
    "luong_concat-nofeed-lstm": dict(attention="luong_concat", cell_type="lstm", input_feeding=False,
                                     bridge="linear_tanh", decoder_layers=1),
    "bahdanau-tied-unidirectional": dict(attention="bahdanau", bidirectional_encoder=False, tie_word_embeddings=True),
    "luong_general-tied-noproj": dict(attention="luong_general", embedding_dim=12, tie_word_embeddings=True),
}


def tiny_config(config: str | Mapping[str, Any], **values) -> PretrainedConfig:
    """The configuration of ``config`` (a family of ``TINY_MODELS``, or a model-config dict with its model_type)
    with ``values`` over it."""
    values = {**(TINY_MODELS[config] if isinstance(config, str) else config), **values}
    return AutoConfig.for_model(values.pop("model_type"), **values)


def tiny_model(config: str | Mapping[str, Any], seed: int | None = 0, attn_implementation: str | None = None,
               **values) -> PreTrainedModel:
    """A random model of ``tiny_config(config, **values)`` in eval mode, initialised from ``seed`` (None: from
    the global random state as it is)."""
    config = tiny_config(config, **values)
    options = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    if seed is not None:
        torch.manual_seed(seed)
    return AutoModelForSeq2SeqLM.from_config(config, **options).eval()


def toy_model(config: str | Mapping[str, Any], seed: int | None = 0, **values) -> PreTrainedModel:
    """``tiny_model`` over the toy vocabulary and special ids (``values`` may replace them too)."""
    return tiny_model(config, seed, **{"vocab_size": TOY_VOCAB_SIZE, **TOY_IDS, **values})


def tiny_transformer_config(**values) -> PretrainedConfig:
    """The configuration of ``TEST_TRANSFORMER``, small enough to run a forward pass in milliseconds; ``values``
    replace any field."""
    return tiny_config(TEST_TRANSFORMER, **values)


def folder_model(family: str, tokenizer: PreTrainedTokenizerFast, **values) -> PreTrainedModel:
    """A random ``FOLDER_MODELS`` model of ``family`` in eval mode, its vocabulary and special ids taken from
    ``tokenizer``."""
    return tiny_model(FOLDER_MODELS[family], **{**special_token_ids(tokenizer), **values})


def rnn_variant(name: str, **values) -> PreTrainedModel:
    """The random ``VARIANT_RNN`` model of ``RNN_VARIANTS[name]`` in eval mode, over the toy special ids."""
    return tiny_model({**VARIANT_RNN, **RNN_VARIANTS[name]}, **{**TOY_IDS, **values})


@functools.cache
def trained_rnn_variant(name: str) -> PreTrainedModel:
    """``rnn_variant(name)`` trained for 40 steps (under a second) to reverse random sources of 2-6 ids: unlike
    random weights, which repeat one token, its outputs depend on the input and end with EOS at varied steps, so
    beams really compete. Shared between tests: do not modify it."""
    generator = torch.Generator().manual_seed(0)

    def batches() -> Iterator[Batch]:
        for _ in range(40):
            lengths = torch.randint(2, 7, (32,), generator=generator).tolist()
            seed = int(torch.randint(10**6, (1,), generator=generator))
            input_ids, attention_mask = source_batch(lengths, seed=seed)
            sources = [row[:length] for row, length in zip(input_ids.tolist(), lengths, strict=True)]
            yield input_ids, attention_mask, toy_labels(sources)

    model = rnn_variant(name)
    train_loop(model, batches(), lr=1e-2, optimizer=torch.optim.Adam, max_grad_norm=None)
    return model.eval()


def random_logits_bias(model: PreTrainedModel, seed: int = 0) -> PreTrainedModel:
    """``model`` (a ``final_logits_bias`` one: ``MARIAN_SWITCHES``) with its bias drawn from N(0, 1) rather than a new
    model's zeros, so that an export which drops it moves the logits by about 1."""
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape,
                                                  generator=torch.Generator().manual_seed(seed)))
    return model


@functools.cache
def trained_marian_like() -> PreTrainedModel:
    """A tiny Transformer with ``MARIAN_SWITCHES`` over the toy vocabulary without <s> (``MARIAN_IDS``,
    ``digit_tokenizer(bos=False)``) and ``MARIAN_GENERATION``, its logits bias random (``random_logits_bias``), trained
    for 300 steps (about 2 s) to reverse digits: its outputs depend on the input and end with </s> at varied steps,
    and its beams agree with CTranslate2's (a model trained less has close calls between beams). Shared between
    tests: do not modify it."""
    model = random_logits_bias(tiny_model({**TEST_TRANSFORMER, **MARIAN_SWITCHES}, **MARIAN_IDS,
                                          vocab_size=TOY_VOCAB_SIZE, d_model=32, encoder_layers=1, decoder_layers=1,
                                          encoder_ffn_dim=64, decoder_ffn_dim=64))
    train_on_toy_task(model, steps=300, batch_size=32, lr=3e-3)
    for key, value in MARIAN_GENERATION.items():
        setattr(model.generation_config, key, value)
    return model.eval()
