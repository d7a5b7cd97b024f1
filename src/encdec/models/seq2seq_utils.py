"""Teacher forcing, the loss and the LM-head plumbing, shared by every model family.

This file is copied next to the weights by ``save_pretrained``: it imports only torch and transformers.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
from torch import nn
from transformers import GenerationConfig
from transformers.cache_utils import Cache
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.utils import ModelOutput

from .compat import CACHE_NAME, cache_argument, cache_field, cache_of


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder input at step t is the gold token y_{t-1}, with y_0 = the start token.

    :param labels: (B, T) target ids, -100 where ignored
    :return: (B, T) decoder input ids
    """
    shifted = labels.new_full(labels.shape, decoder_start_token_id)  # (B, T)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def seq2seq_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Token-level cross-entropy that ignores -100.

    With ``num_items_in_batch`` (passed by Trainer) the summed loss is divided by the token count of the whole
    accumulated batch, so gradient accumulation gives the same gradient as one large batch.

    :param logits: (B, T, V)
    :param labels: (B, T)
    """
    flat_logits = logits.reshape(-1, logits.size(-1)).float()  # (B*T, V)
    if num_items_in_batch is None:
        return nn.functional.cross_entropy(flat_logits, labels.reshape(-1), ignore_index=-100)
    loss = nn.functional.cross_entropy(flat_logits, labels.reshape(-1), ignore_index=-100, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


class OutputFlags(NamedTuple):
    """What one ``forward`` call returns besides its main output."""

    attentions: bool
    hidden_states: bool
    use_cache: bool
    return_dict: bool

    @classmethod
    def resolve(cls, config, output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                use_cache: bool | None = None, return_dict: bool | None = None) -> OutputFlags:
        """transformers' convention: an argument left at ``None`` takes the config's value
        (``config.output_attentions``, ``output_hidden_states``, ``use_cache``, ``return_dict``)."""
        def pick(value: bool | None, name: str) -> bool:
            return bool(getattr(config, name, False) if value is None else value)

        return cls(pick(output_attentions, "output_attentions"), pick(output_hidden_states, "output_hidden_states"),
                   pick(use_cache, "use_cache"), pick(return_dict, "return_dict"))


def as_return_type(output: ModelOutput, return_dict: bool) -> ModelOutput | tuple:
    """``return_dict=False`` gives the documented tuple: exactly ``output.to_tuple()`` (the fields that are not None,
    in declaration order)."""
    return output if return_dict else output.to_tuple()


def seed_auto_map(config, module_name: str, model_class: str) -> None:
    """``save_pretrained`` records only the saving class's auto class in ``auto_map``; seed the bare model's
    ``AutoModel`` entry too, so ``AutoModel.from_pretrained(folder, trust_remote_code=True)`` works."""
    module = module_name.rsplit(".", 1)[-1]
    config.auto_map = {"AutoModel": f"{module}.{model_class}", **(getattr(config, "auto_map", None) or {})}


class Seq2SeqModelMixin:
    """The accessors transformers expects of a bare encoder-decoder (``self.encoder`` and ``self.decoder``, each
    with ``get_input_embeddings`` / ``set_input_embeddings``): with ``tie_word_embeddings`` one matrix serves both."""

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.set_input_embeddings(value)
        if self.config.tie_word_embeddings:
            self.decoder.set_input_embeddings(value)

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.encoder

    def get_decoder(self) -> nn.Module:
        return self.decoder


class LegacyKeysMixin:
    """Loading folders that earlier encdec versions saved, where some weights had other names.

    ``_legacy_keys`` maps a regular expression on a saved weight name to today's (``re.sub``); ``from_pretrained``
    passes them to transformers as ``key_mapping``, then forgets them, so that the model saves under today's names
    (transformers would otherwise write the old names back on ``save_pretrained``).
    """

    _legacy_keys: dict[str, str] = {}

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        if cls._legacy_keys and kwargs.get("key_mapping") is None:
            kwargs["key_mapping"] = cls._legacy_keys
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model._weight_conversions = None  # save under today's names
        return loaded


class CallerLengthMixin:
    """``generate()`` with the caller's length limit over the saved default, for models whose saved generation config
    sets ``max_new_tokens`` (both families: the saved decoding budget, which the CLI and the server read).

    transformers resolves every call into one ``GenerationConfig`` (``_prepare_generation_config``): what the caller
    passes (keywords, or the ``generation_config`` argument) over the model's ``generation_config``. ``max_new_tokens``
    then beats ``max_length`` whoever set it, so the saved ``max_new_tokens`` silently beat a caller's ``max_length``
    (``generate(max_length=N)``, ``Seq2SeqTrainer``'s ``generation_max_length``). Here a ``max_length`` the caller
    gives without a ``max_new_tokens`` of its own replaces the saved ``max_new_tokens`` for that call, and a
    ``max_new_tokens`` without a ``max_length`` replaces a saved ``max_length`` (transformers would keep it and warn
    that both are set), as the caller's values replace the model's everywhere else. A value in the
    ``generation_config`` the caller passes counts as the caller's when it differs from the model's own (a pipeline
    passes a copy of the model's)."""

    def _prepare_generation_config(self, generation_config: GenerationConfig | None, **kwargs) -> tuple:
        config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)

        def asked(name: str) -> bool:
            passed = getattr(generation_config, name, None)
            return kwargs.get(name) is not None or passed not in (None, getattr(self.generation_config, name, None))

        if asked("max_length") and not asked("max_new_tokens"):
            config.max_new_tokens = None
        elif asked("max_new_tokens") and not asked("max_length"):
            config.max_length = None  # a saved max_length (Marian's 512) is not the caller's: no "both set" warning
        return config, model_kwargs

    def set_default_budget(self, tokens: int) -> None:
        """Decode at most ``tokens`` new tokens unless the caller says otherwise, saved in ``generation_config.json``
        (transformers' default is 20 in all): as ``max_new_tokens`` rather than ``max_length``, so that a caller's
        own ``max_new_tokens`` replaces it without a warning, and a caller's ``max_length`` too (above)."""
        if self.generation_config is not None:
            self.generation_config.max_new_tokens = tokens


class Seq2SeqLMMixin(CallerLengthMixin):
    """What every ``*ForConditionalGeneration`` of this package shares: the accessors transformers expects,
    teacher forcing from labels, the loss, and vocabulary resizing. The class sets ``self.model`` (with
    ``encoder``, ``decoder`` and ``get_input_embeddings``) and ``self.lm_head``; its decoder exposes
    ``get_input_embeddings`` / ``set_input_embeddings``. ``generate()`` takes the caller's length limit over the saved
    one (``CallerLengthMixin``)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # These classes are registered for the Auto classes (so save_pretrained ships their code), which makes
        # generate() call inspect.signature(self.forward) at every step, a compatibility check for old remote
        # code. A precomputed __signature__ (the same signature) turns that ~30 us per step into ~2 us.
        if "forward" in cls.__dict__:
            cls.forward.__signature__ = inspect.signature(cls.forward)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        past_key_values: Cache | None = None,
    ) -> Seq2SeqLMOutput | tuple:
        """The base model, then the pre-softmax projection: ``logits`` (B, T, V), and the loss with ``labels``.

        :param labels: (B, T) target ids, -100 = ignored; they are shifted right into ``decoder_input_ids`` (teacher
            forcing) when those are not given, and no cache is made (``use_cache=False``); a cache the caller passes is
            still read and updated, as in Marian (PEFT's prefix tuning passes its prefix so)
        :param num_items_in_batch: the token count of the whole (accumulated) batch, which Trainer passes: the
            summed loss is divided by it
        :param cache: the decoder's cache, read then updated in place; ``past_key_values`` is its name before
            transformers 5.24 (either works on every release; on 5.24 the old one warns, see ``compat``)
        The other arguments are those of the base model's ``forward``; its outputs come along. ``return_dict=False``
        gives ``to_tuple()``.
        """
        cache = cache_argument(cache, past_key_values, owner=self)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
            cache=cache, inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
        )
        return self.lm_output(outputs, labels, num_items_in_batch, return_dict)

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.model.encoder

    def get_decoder(self) -> nn.Module:
        return self.model.decoder

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, next_sequence_length: int | None = None,
                                      **kwargs) -> dict:
        """Continued generation: ``generate(decoder_input_ids=out.sequences, cache=out.cache)`` (before
        transformers 5.24: ``past_key_values``) feeds the decoder only the tokens the cache has not consumed.
        transformers slices them only when a ``decoder_attention_mask`` of the full length is passed; without one it
        would feed the whole prefix again on top of the cache. (With a mask, the ids may be only the new ones:
        transformers decides, as usual.) The cache arrives under the running release's name (``compat.CACHE_NAME``)
        and is passed on under it."""
        cache = kwargs.get(CACHE_NAME)
        unsliced = next_sequence_length is None and kwargs.get("decoder_attention_mask") is None
        if unsliced and cache is not None:
            consumed = cache.get_seq_length()
            if 0 < consumed < input_ids.shape[1]:
                next_sequence_length = input_ids.shape[1] - consumed
        return super().prepare_inputs_for_generation(input_ids, next_sequence_length=next_sequence_length, **kwargs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Used by ``DataCollatorForSeq2Seq(model=...)``: (B, T) labels -> (B, T) decoder inputs."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """Resize the joint vocabulary: encoder and decoder embeddings and the LM head, tied or not."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if not self.config.tie_word_embeddings:  # transformers resizes only the input embedding and the head
            decoder = self.get_decoder()
            decoder.set_input_embeddings(self._get_resized_embeddings(
                decoder.get_input_embeddings(), embeddings.num_embeddings, mean_resizing=mean_resizing))
        bias = getattr(self, "final_logits_bias", None)
        if bias is not None:  # kept per token; a new token's bias is 0 (as MarianMTModel resizes its own)
            kept = bias[:, :embeddings.num_embeddings]
            grown = bias.new_zeros(1, embeddings.num_embeddings - kept.size(1))
            self.register_buffer("final_logits_bias", torch.cat([kept, grown], dim=1))
        return embeddings

    def lm_output(self, outputs: Seq2SeqModelOutput, labels: torch.Tensor | None,
                  num_items_in_batch: int | torch.Tensor | None, return_dict: bool | None) -> Seq2SeqLMOutput | tuple:
        """The pre-softmax projection of the decoder output (B, T, V), the loss when labels are given, and the
        base model's other outputs; as a tuple when ``return_dict`` (or the config's, if None) is False."""
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, V)
        bias = getattr(self, "final_logits_bias", None)  # Marian's output bias (the Transformer's config switch)
        if bias is not None:
            logits = logits + bias.to(logits.dtype)
        loss = seq2seq_cross_entropy(logits, labels, num_items_in_batch) if labels is not None else None
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **cache_field(cache_of(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return as_return_type(output, OutputFlags.resolve(self.config, return_dict=return_dict).return_dict)


Seq2SeqLMMixin.forward.__signature__ = inspect.signature(Seq2SeqLMMixin.forward)  # see __init_subclass__
