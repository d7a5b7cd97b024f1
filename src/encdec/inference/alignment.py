"""Word alignments from attention: which source words each output word was translated from.

A model's cross-attention (Transformer) or alignment (Bahdanau et al. 2015, Eq. 6; Luong et al. 2015, Eq. 7) gives,
for every target subword, weights over the source subwords. Following Garg et al. (2019, "Jointly Learning to Align
and Translate with Transformer Models", Sec. 3), each target subword is linked to the source subword it attends to
most (the argmax of its column), after averaging over the heads of one decoder layer; the links are then lifted to
words (a word pair is linked when any of their subwords are) and printed in the Pharaoh format of fast_align and
Moses: ``i-j`` for source word i and target word j, 0-based, words being the whitespace-separated tokens of the
lines.

Which layer aligns best differs by model (Garg et al. found the penultimate of six; Kobayashi et al. and others
report other layers), so it is chosen on data with gold alignments by the alignment error rate (Och and Ney 2003):

    AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)

for predicted links A, sure links S and possible links P (here P = S). ``choose_layer`` does that, and
``encdec align --gold-file`` records the choice in the model folder (``alignment.json``). The RNN has one alignment
(one "layer", one "head"), so there is nothing to choose.

**What "the alignment" of a translation means, everywhere** (the server's API and page, ``translate --alignments``,
``align`` and ``plot-attention``): the teacher-forced cross-attention over the source of each output token
(``teacher_forced_attention``) on the model's alignment layer (``default_layer``: the one ``alignment.json`` records,
else the penultimate decoder layer, the best in Garg et al.), averaged over that layer's heads
(``alignment_weights``). Another layer (a number, or ``mean`` for all of them) or one head is an explicit option of
each front end (``alignment_layer``/``alignment_head``, ``--alignment-layer``/``--alignment-head``, ``--layer``/
``--head``). Teacher-forced on the output, the weights are the ones its generation computed: the decoder is causal.

fast_align, eflomal and awesome-align align given sentence pairs with their own models; none reads a translation
model's attention, hence this module.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..data import DATE_FORMATS, DATE_RANGE
from ..decoding_options import check_languages
from ..errors import EncdecError, InputFileError, OptionError
from ..folders import ALIGNMENT_FILE
from ..io_utils import atomic_write_json
from ..tokenization import language_ids, refuse_language_tokens

MEAN = "mean"  # every layer's head average, averaged again over the layers
Links = set[tuple[int, int]]


def word_of_tokens(tokenizer, ids: Sequence[int]) -> list[int | None]:
    """For each token of ``ids``, the index of the whitespace-separated word of the decoded text it belongs to; None
    for special tokens and for tokens that decode to nothing. Token t belongs to the last word of the text that
    ``ids[:t + 1]`` decodes to, which holds for any tokenizer whose decoder joins subwords into words."""
    special = set(tokenizer.all_special_ids)
    words: list[int | None] = []
    for t, token in enumerate(ids):
        if token in special or not tokenizer.decode([token]).strip():
            words.append(None)
            continue
        words.append(len(tokenizer.decode(ids[:t + 1], skip_special_tokens=True).split()) - 1)
    return words


def hard_links(weights: torch.Tensor, source_words: Sequence[int | None], target_words: Sequence[int | None]) -> Links:
    """Word links from an (S, T) weight matrix: each target subword with a word takes the source subword (with a
    word) of its largest weight (Garg et al. 2019); links are lifted to word indices."""
    rows = [s for s, word in enumerate(source_words) if word is not None]
    if not rows:
        return set()
    links = set()
    for t, target_word in enumerate(target_words):
        if target_word is None or t >= weights.size(1):
            continue
        best = rows[int(weights[rows, t].argmax())]
        links.add((source_words[best], target_word))
    return links


def to_pharaoh(links: Links) -> str:
    """``0-0 1-2 ...``, sorted by source then target word."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def parse_pharaoh(line: str, where: str = "alignment") -> Links:
    """The links of one Pharaoh line (``i-j`` pairs; ``i?j``, the possible links of some gold files, count as links)."""
    links = set()
    for pair in line.split():
        parts = pair.replace("?", "-").replace("p", "-").split("-")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            raise EncdecError(f"{where}: {pair!r} is not a Pharaoh link; write links as i-j (0-based source-target "
                              "word indices), separated by spaces.")
        links.add((int(parts[0]), int(parts[1])))
    return links


def alignment_error_rate(predicted: Sequence[Links], sure: Sequence[Links],
                         possible: Sequence[Links] | None = None) -> float:
    """Och and Ney (2003): 1 - (|A & S| + |A & P|) / (|A| + |S|) over a corpus; ``possible`` defaults to ``sure``
    (and always includes it)."""
    if len(predicted) != len(sure):
        raise EncdecError(f"{len(predicted)} predicted alignments but {len(sure)} gold ones; give one per pair.")
    possible = possible if possible is not None else sure
    hits_sure = sum(len(a & s) for a, s in zip(predicted, sure, strict=True))
    hits_possible = sum(len(a & (p | s)) for a, p, s in zip(predicted, possible, sure, strict=True))
    total = sum(len(a) for a in predicted) + sum(len(s) for s in sure)
    return 1.0 - (hits_sure + hits_possible) / total if total else 0.0


def attention_by_layer(model, source_ids: Sequence[int], target_ids: Sequence[int]) -> torch.Tensor:
    """The teacher-forced cross-attention of one pair, averaged over heads: (L, S, T) for L decoder layers (the RNN,
    and an ensemble's first member when it is an RNN: L = 1).

    :param target_ids: the output tokens without the decoder start token (the model prepends it), ``</s>`` included
    """
    return teacher_forced_attention(model, source_ids, target_ids)[1].mean(dim=1)


def teacher_forced_attention(model, source_ids: Sequence[int], target_ids: Sequence[int]
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """One teacher-forced pass: each target token's log-probability (T,) and the cross-attention of every decoder
    layer and head (L, H, S, T)."""
    device = model.device
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([list(source_ids)], device=device),
                    labels=torch.tensor([list(target_ids)], device=device), output_attentions=True)
    if not out.cross_attentions or out.cross_attentions[0] is None:
        raise EncdecError("This model has no attention to align with (an RNN with `attention: none`); word "
                          "alignments need a Transformer or an RNN with Bahdanau or Luong attention.")
    log_probs = out.logits[0].float().log_softmax(-1)  # (T, V)
    chosen = log_probs.gather(-1, torch.tensor(list(target_ids), device=device)[:, None])[:, 0]
    return chosen, torch.stack([layer[0].float() for layer in out.cross_attentions]).transpose(2, 3)


def alignment_weights(by_head: torch.Tensor, layer: int | str, head: int | None = None) -> torch.Tensor:
    """The alignment (S, T) of a translation from its ``teacher_forced_attention`` (L, H, S, T): decoder layer
    ``layer`` (0-based, negative from the top, or ``"mean"`` for every layer's), averaged over its heads, or head
    ``head`` alone (the module docstring says why this is the one meaning of an alignment)."""
    if head is not None and not 0 <= head < by_head.size(1):
        raise EncdecError(f"`alignment head` {head} does not exist: the model has {by_head.size(1)} head(s) per "
                          f"layer; use 0 to {by_head.size(1) - 1}, or none for their mean.")
    return layer_weights(by_head.mean(dim=1) if head is None else by_head[:, head], layer)


def attention_shape(config) -> tuple[int, int] | None:
    """(decoder layers, heads per layer) of the cross-attention a model of ``config`` returns (the RNN: one each);
    None for another kind (an ensemble aligns with its first member's)."""
    if config.model_type == "transformer_seq2seq":
        return config.decoder_layers, config.decoder_attention_heads
    return (1, 1) if config.model_type == "rnn_seq2seq" else None


def check_alignment_choice(config, layer: int | str | None, head: int | None) -> None:
    """An ``OptionError`` naming ``alignment_layer`` or ``alignment_head`` when a model of ``config`` has no such
    layer or head: a request is refused before it is decoded."""
    shape = attention_shape(config) if layer is not None or head is not None else None
    if shape is None:  # nothing chosen, or checked as it is decoded (``alignment_weights``)
        return
    layers, heads = shape
    if layer is not None and layer != MEAN and not (isinstance(layer, int) and -layers <= layer < layers):
        raise OptionError("alignment_layer", f"must be a decoder layer from 0 to {layers - 1} (negative counts from "
                                             f"the top) or {MEAN!r}, got {layer!r}.")
    if head is not None and not (isinstance(head, int) and 0 <= head < heads):
        raise OptionError("alignment_head", f"must be a head from 0 to {heads - 1} (none: their mean), got "
                                            f"{head!r}.")


def alignment_request(layer: int | str | None, head: int | None) -> dict[str, Any]:
    """The decoding options (``resolve_options``'s) that ask for each translation's alignment on ``layer`` and
    ``head`` (None: the model's alignment layer, the mean of its heads), as ``align`` and ``plot-attention`` ask it."""
    return {"alignments": True, "alignment_layer": layer, "alignment_head": head}


def layer_weights(by_layer: torch.Tensor, layer: int | str) -> torch.Tensor:
    """(S, T) weights of one decoder layer (0-based, negative counts from the top) or of ``"mean"``."""
    if layer == MEAN:
        return by_layer.mean(dim=0)
    if not isinstance(layer, int) or not -by_layer.size(0) <= layer < by_layer.size(0):
        raise EncdecError(f"`alignment layer` {layer!r} does not exist: the model has {by_layer.size(0)} decoder "
                          f"layer(s); use 0 to {by_layer.size(0) - 1}, a negative index, or {MEAN!r}.")
    return by_layer[layer]


def default_layer(model) -> int | str:
    """The layer ``alignment.json`` of the model's folder names, else the penultimate decoder layer, the best one in
    Garg et al. (2019) (the only one for an RNN)."""
    model = model.members[0] if hasattr(model, "members") else model  # an ensemble aligns with its first member
    recorded = recorded_layer(getattr(model.config, "_name_or_path", "") or "")
    if recorded is not None:
        return recorded
    layers = getattr(model.config, "decoder_layers", 1) if model.config.model_type == "transformer_seq2seq" else 1
    return max(layers - 2, 0)


def recorded_layer(model_dir: str | os.PathLike) -> int | str | None:
    path = Path(model_dir) / ALIGNMENT_FILE if model_dir else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))["layer"]
    except (OSError, ValueError, KeyError) as error:
        raise InputFileError(f"{path} is not a valid alignment record ({error}); delete it or rerun "
                             "`encdec align --gold-file ...` to write it again.") from None


def word_links(weights: torch.Tensor, tokenizer, source_ids: Sequence[int], target_ids: Sequence[int]) -> Links:
    """The word links of a pair from its alignment weights (S, T)."""
    return hard_links(weights, word_of_tokens(tokenizer, source_ids), word_of_tokens(tokenizer, target_ids))


def encode_pairs(tokenizer, sources: Sequence[str], targets: Sequence[str], source_lang: str | None = None,
                 target_lang: str | None = None) -> list[tuple[list[int], list[int]]]:
    """Source and target ids (each ending with ``</s>``) of text pairs, for teacher-forced alignment; for a
    multilingual model each starts with the token of its language (``source_lang``, ``target_lang``: both needed,
    checked as ``decoding_options.check_languages`` checks them), as a translation's do."""
    if len(sources) != len(targets):
        raise EncdecError(f"{len(sources)} sources but {len(targets)} targets; give one target per source.")
    languages = language_ids(tokenizer)
    if languages or source_lang is not None or target_lang is not None:
        check_languages(source_lang, target_lang, languages)
        refuse_language_tokens(tokenizer, [*sources, *targets])
        tokenizer.src_lang, tokenizer.tgt_lang = source_lang, target_lang
    source_ids = tokenizer(list(sources))["input_ids"]
    target_ids = tokenizer(text_target=list(targets))["input_ids"]
    return list(zip(source_ids, target_ids, strict=True))


def choose_layer(model, tokenizer, sources: Sequence[str], targets: Sequence[str],
                 gold: Sequence[Links], **languages: str | None) -> tuple[int | str, dict[str, float]]:
    """The decoder layer (or ``"mean"``) whose links have the lowest AER against ``gold`` on these pairs, and every
    candidate's AER. Each pair costs one teacher-forced pass, shared by all candidates. ``languages``: a
    multilingual model's ``source_lang`` and ``target_lang`` (``encode_pairs``)."""
    pairs = encode_pairs(tokenizer, sources, targets, **languages)
    predicted: dict[int | str, list[Links]] = {}
    for source_ids, target_ids in pairs:
        by_layer = attention_by_layer(model, source_ids, target_ids)
        source_words, target_words = word_of_tokens(tokenizer, source_ids), word_of_tokens(tokenizer, target_ids)
        candidates: list[int | str] = list(range(by_layer.size(0))) + ([MEAN] if by_layer.size(0) > 1 else [])
        for layer in candidates:
            predicted.setdefault(layer, []).append(hard_links(layer_weights(by_layer, layer), source_words,
                                                              target_words))
    rates = {str(layer): alignment_error_rate(links, gold) for layer, links in predicted.items()}
    best = min(predicted, key=lambda layer: (rates[str(layer)], str(layer)))
    return best, rates


def record_layer(model_dir: str | os.PathLike, layer: int | str, rates: dict[str, float], data: str) -> Path:
    """Write the chosen layer and the AER of every candidate to ``model_dir/alignment.json`` (atomically)."""
    path = Path(model_dir) / ALIGNMENT_FILE
    atomic_write_json(path, {"layer": layer, "aer": rates, "chosen_on": data,
                             "method": "argmax of the head-averaged cross-attention per target subword "
                                       "(Garg et al. 2019), lifted to words"})
    return path


# --- the built-in task with alignments known by construction ---------------------------------------------------------

def _date_field_words() -> list[tuple[Any, list[set[str]]]]:
    """Each built-in date format with, for each of its words, the fields (year, month, day) it writes. The words
    are found once on a probe date whose fields cannot be confused (23 November 1987, a Monday); every format writes
    the same number of words for every date, so the positions hold for all dates."""
    probe = dt.date(1987, 11, 23)
    clues = {"year": ("1987", "87"), "month": ("11", "nov"), "day": ("23",)}
    tagged = []
    for render in DATE_FORMATS:
        words = render(probe).split()
        fields = [{field for field, marks in clues.items() if any(mark in word.lower() for mark in marks)}
                  for word in words]
        tagged.append((render, fields))
    return tagged


def date_alignment_pairs(n: int, seed: int = 0) -> list[tuple[str, str, Links]]:
    """``n`` (human-readable date, "YYYY MM DD", gold links) triples: the built-in date task with the ISO date's
    fields as three words, aligned to the source words that write them (a weekday is unaligned; a word such as
    "03.03.2021" that writes all three fields is linked to all three target words)."""
    rng = random.Random(seed)
    tagged = _date_field_words()
    order = ("year", "month", "day")
    triples = []
    for _ in range(n):
        date = dt.date.fromordinal(rng.randint(*DATE_RANGE))
        render, fields = rng.choice(tagged)
        gold = {(i, order.index(field)) for i, word_fields in enumerate(fields) for field in word_fields}
        triples.append((render(date), f"{date.year} {date.month:02d} {date.day:02d}", gold))
    return triples


__all__ = ["ALIGNMENT_FILE", "MEAN", "alignment_error_rate", "alignment_request", "alignment_weights",
           "attention_by_layer", "attention_shape", "check_alignment_choice", "choose_layer",
           "date_alignment_pairs", "default_layer", "encode_pairs", "hard_links", "layer_weights", "parse_pharaoh",
           "record_layer", "recorded_layer", "teacher_forced_attention", "to_pharaoh", "word_links", "word_of_tokens"]
