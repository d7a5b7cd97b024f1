"""Ensembles: several trained seq2seq models decoding as one model, through ``generate()``.

At every decoding step each member m gives log p_m(y | y_<t, x) over the shared vocabulary, and the ensemble scores
token y with their mean,

    s(y | y_<t, x) = (1/M) sum_m log p_m(y | y_<t, x),

which ``generate()`` then treats as logits: greedy search takes the argmax, beam search and sampling renormalise it
with a softmax. That is the log-linear ensemble (a product of experts, Hinton 2002) that Marian decodes with
(Junczys-Dowmunt et al. 2018, "Marian: Fast Neural Machine Translation in C++"); fairseq averages probabilities
instead. Ensembles of independently trained models are how Sutskever et al. (2014, Sec. 3.6) and Vaswani et al.
(2017, Table 2, the "ensemble" rows of earlier work) report their best scores; averaging the weights of one run
(``encdec average``) is the cheaper alternative Joey NMT offers.

Each member encodes the source with its own encoder and keeps its own cache (a Transformer's key/value cache, an
RNN's recurrent state), which beam search reorders with the member's own ``_reorder_cache``; so a Transformer and an
LSTM make a real ensemble. The members must share one tokenizer (``check_same_tokenizer``).

transformers has no ensemble of generation models (its ``generate()`` takes one model), hence this module: a small
``PreTrainedModel`` whose ``forward`` combines its members, so that every ``generate()`` option works unchanged.

    from encdec.inference import load_ensemble
    ensemble, tokenizer = load_ensemble(["runs/a", "runs/b"])  # or EnsembleForSeq2SeqLM([model_a, model_b])
    ensemble.generate(**tokenizer(["Ein Hund läuft."], return_tensors="pt"))  # with any generate() option
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils import ModelOutput

from ..errors import EncdecError
from ..models.compat import cache_argument, cache_field, cache_of
from ..models.seq2seq_utils import CallerLengthMixin

# config keys every member must agree on: the ids generate() uses and the vocabulary the log-probabilities range over
SHARED_KEYS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


class EnsembleConfig(PretrainedConfig):
    """What ``generate()`` reads from an ensemble's config: the shared vocabulary and special ids, and the members'
    model types (for the record). Not saved: an ensemble is a list of model folders, not a model of its own."""

    model_type = "encdec_ensemble"

    def __init__(self, vocab_size: int | None = None, member_types: Sequence[str] = (),
                 max_position_embeddings: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("is_encoder_decoder", True)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.member_types = list(member_types)
        self.max_position_embeddings = max_position_embeddings


@dataclass
class EnsembleEncoderOutput(ModelOutput):
    """Every member's encoder output. ``last_hidden_state`` is the first member's, for the parts of ``generate()``
    that read one (its batch size and device)."""

    last_hidden_state: torch.Tensor | None = None
    members: tuple[ModelOutput, ...] | None = None


class EnsembleCache:
    """Every member's cache, in member order. A member's entry is whatever that member returns as its cache
    (``EncoderDecoderCache`` for the Transformer, ``RNNSeq2SeqCache`` for the RNN).

    It is not a ``transformers.Cache`` (it has no layers of its own), so it answers the questions ``generate`` asks
    of a cache for its members: the length, whether it compiles (never) or can be cropped (when every member's
    can), and the cache operations, which each member's cache does its own way."""

    is_compileable = False

    def __init__(self, members: Sequence[Any]) -> None:
        self.members = list(members)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The number of target tokens the caches hold (the same for every member)."""
        return self.members[0].get_seq_length() if self.members and self.members[0] is not None else 0

    @property
    def is_croppable(self) -> bool:
        return all(member is not None and member.is_croppable for member in self.members)

    @property
    def is_linear(self) -> list[bool]:
        """No layer of its own is a recurrent-state layer (``generate`` then asks for the length, as it should)."""
        return [False]

    def activate_past_recording(self) -> None:
        for member in self.members:
            member.activate_past_recording()

    def crop(self, tokens_to_remove: int) -> None:
        for member in self.members:
            member.crop(tokens_to_remove)


class EnsembleEncoder(nn.Module):
    """Runs each member's own encoder on the same source. It holds the members without registering them as
    submodules (the ensemble does), so their parameters are counted once."""

    main_input_name = "input_ids"

    def __init__(self, members: Sequence[PreTrainedModel]) -> None:
        super().__init__()
        self._members = list(members)

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                return_dict: bool = True, **kwargs: Any) -> EnsembleEncoderOutput:
        outputs = tuple(member.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
                        for member in self._members)
        return EnsembleEncoderOutput(last_hidden_state=outputs[0].last_hidden_state, members=outputs)


def _shared_config(members: Sequence[PreTrainedModel]) -> EnsembleConfig:
    """The ensemble's config; a one-line error naming the first member whose vocabulary or ids differ."""
    first = members[0].config
    for index, member in enumerate(members[1:], start=1):
        for key in SHARED_KEYS:
            if getattr(member.config, key, None) != getattr(first, key, None):
                raise EncdecError(f"Ensemble member {index} has {key}={getattr(member.config, key, None)} but member 0 "
                                  f"has {getattr(first, key, None)}; the members of an ensemble must share one "
                                  "vocabulary: train them with the same tokenizer.")
    positions = [getattr(member.config, "max_position_embeddings", None) for member in members]
    known = [p for p in positions if p is not None]
    return EnsembleConfig(member_types=[member.config.model_type for member in members],
                          max_position_embeddings=min(known) if known else None,
                          **{key: getattr(first, key, None) for key in SHARED_KEYS})


class EnsembleForSeq2SeqLM(CallerLengthMixin, PreTrainedModel, GenerationMixin):
    """The members' mean log-probability at each step, as the logits of one seq2seq model (see the module's
    docstring). ``generate()`` (greedy, beam search, sampling, n-best lists) works on it as on any member.

    :param members: trained encdec models (any family) sharing one vocabulary; their generation config is the
        first member's (a caller's ``max_length`` replaces its saved budget, as for a member:
        ``CallerLengthMixin``)
    """

    config_class = EnsembleConfig
    base_model_prefix = "ensemble"
    main_input_name = "input_ids"

    def __init__(self, members: Sequence[PreTrainedModel]) -> None:
        members = list(members)
        if not members:
            raise EncdecError("An ensemble needs at least one model; pass one or more model folders.")
        super().__init__(_shared_config(members))
        self.post_init()  # before the members exist: it must not touch their trained weights
        self.members = nn.ModuleList(members)
        self.encoder = EnsembleEncoder(members)
        self.generation_config = GenerationConfig.from_dict(members[0].generation_config.to_dict())

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """Each member makes its own cache on the first step; generate() must not make one for the ensemble."""
        return False

    def get_encoder(self, modality: str | None = None) -> EnsembleEncoder:
        return self.encoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        encoder_outputs: EnsembleEncoderOutput | None = None,
        cache: EnsembleCache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: EnsembleCache | None = None,
        **kwargs: Any,
    ) -> Seq2SeqLMOutput:
        """:param decoder_input_ids: (B, T) (only the new tokens when the caches hold the earlier ones);
        :param labels: (B, T) teacher forcing, as for a member; the loss is the cross-entropy of the renormalised
            ensemble distribution
        :param cache: an ``EnsembleCache`` (``past_key_values``: its name before transformers 5.24; either works)
        :return: ``logits`` (B, T, V): the members' mean log-probabilities; the cache: an ``EnsembleCache``; with
            ``output_attentions``, the first member's ``cross_attentions``"""
        cache = cache_argument(cache, past_key_values, owner=self)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        caches = cache.members if cache is not None else [None] * len(self.members)
        kwargs.pop("cache_position", None)  # the members keep their own positions
        log_probs, new_caches, first = [], [], None
        for member, encoded, member_cache in zip(self.members, encoder_outputs.members, caches, strict=True):
            out = member(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, encoder_outputs=encoded,
                         cache=member_cache, labels=labels, use_cache=use_cache, return_dict=True, **kwargs)
            log_probs.append(out.logits.float().log_softmax(dim=-1))
            new_caches.append(cache_of(out))
            first = out if first is None else first
        logits = torch.stack(log_probs).mean(dim=0)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                               ignore_index=-100)
        return Seq2SeqLMOutput(
            loss=loss, logits=logits,
            **cache_field(EnsembleCache(new_caches) if use_cache is not False and labels is None else None),
            cross_attentions=first.cross_attentions, encoder_last_hidden_state=encoder_outputs.last_hidden_state)

    def _expand_inputs_for_generation(self, expand_size: int = 1, is_encoder_decoder: bool = False,
                                      input_ids: torch.LongTensor | None = None, **model_kwargs: Any):
        """Beams and returned sequences: generate() repeats the top-level tensors of ``encoder_outputs``; here each
        member's encoder output is repeated the same way (batch-first, ``repeat_interleave`` on dim 0)."""
        input_ids, model_kwargs = super()._expand_inputs_for_generation(
            expand_size, is_encoder_decoder, input_ids, **model_kwargs)
        outputs = model_kwargs.get("encoder_outputs")
        if expand_size > 1 and outputs is not None and outputs.members is not None:
            outputs["members"] = tuple(
                type(member)(**{key: value.repeat_interleave(expand_size, dim=0) if torch.is_tensor(value) else value
                                for key, value in member.items()})
                for member in outputs.members)
        return input_ids, model_kwargs

    def _reorder_cache(self, cache: EnsembleCache, beam_idx: torch.LongTensor) -> EnsembleCache:
        """Beam search: each member keeps the states of the surviving beams, reordered its own way."""
        return EnsembleCache([member._reorder_cache(member_cache, beam_idx)
                              for member, member_cache in zip(self.members, cache.members, strict=True)])

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        raise EncdecError("An ensemble is not saved as one model: it is its members' folders. Save or push each "
                          "member, and load them together with encdec.inference.load_ensemble.")


def _tokenizer_parts(tokenizer) -> dict[str, Any]:
    """The parts of a fast tokenizer that decide its ids, from its serialised ``tokenizer.json``."""
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    model = state.get("model", {})
    return {"vocabulary": model.get("vocab"), "merges": model.get("merges"), "model type": model.get("type"),
            "normalizer": state.get("normalizer"), "pre-tokenizer": state.get("pre_tokenizer"),
            "added tokens": state.get("added_tokens"), "special tokens": tokenizer.special_tokens_map,
            "languages": getattr(tokenizer, "language_tokens", None)}  # a multilingual model's code -> token


def tokenizer_difference(first, other) -> str | None:
    """Where ``other`` differs from ``first``, in words (the first difference), or None when they encode alike."""
    a, b = _tokenizer_parts(first), _tokenizer_parts(other)
    for part in a:
        if a[part] == b[part]:
            continue
        if part == "vocabulary" and isinstance(a[part], dict) and isinstance(b[part], dict):
            if len(a[part]) != len(b[part]):
                return f"vocabulary size ({len(b[part])} against {len(a[part])})"
            by_id_a = {i: t for t, i in a[part].items()}
            by_id_b = {i: t for t, i in b[part].items()}
            odd = min(i for i in by_id_a if by_id_a[i] != by_id_b.get(i))
            return f"vocabulary (id {odd} is {by_id_b.get(odd)!r} against {by_id_a[odd]!r})"
        return part
    return None


def check_same_tokenizer(tokenizers: Sequence[Any], names: Sequence[str]) -> None:
    """A one-line error naming the first member whose tokenizer differs from the first member's, and where."""
    for tokenizer, name in zip(tokenizers[1:], names[1:], strict=True):
        difference = tokenizer_difference(tokenizers[0], tokenizer)
        if difference:
            raise EncdecError(f"The tokenizer of {name} differs from that of {names[0]} in its {difference}; the "
                              "members of an ensemble must share one tokenizer (train them with the same "
                              "`tokenizer.path`).")


__all__ = ["EnsembleCache", "EnsembleConfig", "EnsembleForSeq2SeqLM", "check_same_tokenizer", "tokenizer_difference"]
