"""The RNN under transformers' generic code and the fine-tuning tools users bring (issue 40, points 1, 2 and 7).

- Its cache is read as transformers reads a Mamba-style model's cache: every layer a recurrent-state layer, read
  through ``Cache``'s own methods; ``generate``'s own paths (the prefill's length logic, beam reordering through the
  cache, assisted and prompt-lookup decoding, continuing from a returned cache) give what plain decoding gives, and
  plain decoding keeps one state.
- ``inputs_embeds`` and ``decoder_inputs_embeds`` give exactly the logits of the ids they embed.
- Gradient checkpointing gives the gradients of the same computation without it, keeps fewer activations, and
  trains a LoRA adapter.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin

from encdec.models.compat import cache_field, cache_of
from encdec.models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from encdec.models.rnn_cache import RNNSeq2SeqCache
from toy import BOS, RNN_VARIANTS, rnn_variant, source_batch, target_batch, trained_rnn_variant

ALL = pytest.mark.parametrize("variant", list(RNN_VARIANTS))
# every attention with an LSTM or a GRU, both decoder unrollings (token by token, fused), context feeding
SOME = pytest.mark.parametrize("variant", ["bahdanau-lstm", "bahdanau-gru", "luong_dot-gru", "luong_general-lstm",
                                           "luong_concat-nofeed-lstm", "none-context-gru-unidirectional"])


def batch(size: int = 3, target_length: int = 4) -> dict[str, torch.Tensor]:
    input_ids, attention_mask = source_batch((5, 3, 7, 4)[:size])
    decoder_input_ids = torch.cat([torch.full((size, 1), BOS), target_batch(size, target_length)], dim=1)
    return dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)


def run(model, inputs: dict[str, torch.Tensor], ids: torch.Tensor, cache: RNNSeq2SeqCache | None):
    """The model on ``ids`` as the decoder's (new) tokens, going on from ``cache``."""
    return model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], decoder_input_ids=ids,
                 use_cache=True, return_dict=True, **cache_field(cache))


# --- the cache, read as transformers reads recurrent state ------------------------------------------------------------


def check_recurrent_cache(cache: RNNSeq2SeqCache, batch_size: int, length: int) -> None:
    """Every layer read through ``Cache``'s generic methods, the way transformers reads a Mamba-style cache."""
    assert cache.is_linear == [True] * len(cache.layers)  # generate's `_prefill` and mask code branch on this
    assert cache.get_seq_length() == length and cache.has_previous_state()
    assert not cache.is_compileable and cache.is_croppable and cache.get_max_length() == -1
    assert not any(cache.is_sliding)
    for index, layer in enumerate(cache.layers):
        assert isinstance(layer, LinearAttentionCacheLayerMixin) and not isinstance(layer, CacheLayerMixin)
        assert layer.keys is None and layer.values is None  # as transformers' DummyLayer: no key/value states
        assert layer.number_of_states == len(layer.recurrent_states)
        for state_idx, state in layer.recurrent_states.items():
            assert state.size(0) == batch_size and layer.has_previous_state[state_idx]
            assert layer.is_recurrent_states_initialized[state_idx] and layer.conv_states[state_idx] is None
            if hasattr(cache, "get_recurrent_state"):  # transformers >= 5.21
                assert cache.get_recurrent_state(index, state_idx) is state
                assert cache.get_conv_state(index, state_idx) is None
                assert cache.is_recording_past(index) == layer.record_past
    state = cache.layers[0].recurrent_states
    assert torch.equal(state[0], cache.hidden.transpose(0, 1))  # s_t, batch first: the state the decoder goes on from
    if cache.feed is not None:  # Luong's h~_t with input feeding: the last state
        assert state[len(state) - 1] is cache.feed


@ALL
@torch.no_grad()
def test_every_cache_layer_reads_as_recurrent_state(variant: str) -> None:
    model, inputs = rnn_variant(variant), batch()
    out = model(**inputs, use_cache=True, return_dict=True)
    check_recurrent_cache(cache_of(out), batch_size=3, length=5)
    memory = cache_of(out).layers[1]
    assert (memory.number_of_states == 2) == (model.config.attention != "none")
    beams = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], num_beams=2,
                           max_new_tokens=4, min_new_tokens=4, return_dict_in_generate=True)
    check_recurrent_cache(cache_of(beams), batch_size=3 * 2, length=4)
    cache = cache_of(beams)
    cache.reset()
    assert cache.get_seq_length() == 0 and not cache.has_previous_state() and cache.keys is None
    assert all(not layer.recurrent_states for layer in cache.layers)


@SOME
@torch.no_grad()
def test_generic_batch_operations_move_both_layers(variant: str) -> None:
    """``Cache``'s own batch methods (transformers calls them for beams and for finished rows) act on the state and
    the source memory alike: going on from the rearranged cache equals running the rearranged batch."""
    model, inputs = rnn_variant(variant), batch()
    target = inputs["decoder_input_ids"]
    full = run(model, inputs, target, None).logits
    order = torch.tensor([2, 0, 2])
    for rearrange, rows in [(lambda cache: cache.reorder_cache(order), order),
                            (lambda cache: cache.batch_select_indices(torch.tensor([True, False, True])),
                             torch.tensor([0, 2])),
                            (lambda cache: cache.batch_repeat_interleave(2), torch.tensor([0, 0, 1, 1, 2, 2]))]:
        cache = cache_of(run(model, inputs, target[:, :3], None))
        rearrange(cache)
        sub = {key: value[rows] for key, value in inputs.items()}
        going_on = run(model, sub, target[rows, 3:], cache).logits
        torch.testing.assert_close(going_on, full[rows, 3:], atol=1e-6, rtol=0)


@SOME
@torch.no_grad()
def test_a_copied_cache_goes_on_like_the_original(variant: str) -> None:
    """Prompt caching's recipe (``copy.deepcopy`` of a filled cache, then generate from each copy) works: the cache
    holds nothing that copies share."""
    model, inputs = rnn_variant(variant), batch()
    kwargs = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], do_sample=False,
                  return_dict_in_generate=True)
    once = model.generate(**kwargs, max_new_tokens=6, min_new_tokens=6)
    first = model.generate(**kwargs, max_new_tokens=3, min_new_tokens=3)
    for _ in range(2):
        cache = copy.deepcopy(cache_of(first))
        again = model.generate(**kwargs, max_new_tokens=3, min_new_tokens=3, decoder_input_ids=first.sequences,
                               **cache_field(cache))
        assert torch.equal(again.sequences, once.sequences)
    assert cache_of(first).get_seq_length() == 3  # the copies, not the original, went on


@torch.no_grad()
def test_crop_zero_keeps_only_what_the_next_call_needs() -> None:
    """transformers' convention for recurrent-state layers: ``crop(0)`` removes nothing and shrinks a recording layer
    to what the next call needs (``generate`` calls it once it has settled a step), so recording costs O(1) memory
    again; a crop into a call keeps the tokens to replay."""
    model, inputs = rnn_variant("luong_general-lstm"), batch()
    target = inputs["decoder_input_ids"]
    full = run(model, inputs, target, None).logits
    cache = RNNSeq2SeqCache()
    cache.activate_past_recording()
    run(model, inputs, target[:, :1], cache)
    for t in range(1, 4):
        run(model, inputs, target[:, t : t + 1], cache)
    assert len(cache.state.checkpoints) == 5 and len(cache.state.inputs) == 4
    cache.crop(0)
    assert cache.get_seq_length() == 4 and len(cache.state.checkpoints) == 1 and not cache.state.inputs
    with pytest.raises(ValueError, match="crop\\(0\\)"):
        cache.crop(-1)
    torch.testing.assert_close(run(model, inputs, target[:, 4:], cache).logits, full[:, 4:], atol=1e-6, rtol=0)
    cache = cache_of(run(model, inputs, target[:, :3], RNNSeq2SeqCache()))
    cache.activate_past_recording()
    run(model, inputs, target[:, 3:], cache)
    cache.crop(-1)
    cache.crop(0)
    assert cache.get_seq_length() == 4 and cache.state.replay.size(1) == 1
    torch.testing.assert_close(run(model, inputs, target[:, 4:], cache).logits, full[:, 4:], atol=1e-6, rtol=0)


# --- generate's own paths ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", ["none", "full"])
@ALL
@torch.no_grad()
def test_continued_generation_equals_one_call(variant: str, mask: str) -> None:
    """``generate`` again from a returned cache and the sequences so far: transformers leaves slicing the consumed
    tokens to the model for recurrent-state caches (``_prefill``), with or without a ``decoder_attention_mask``."""
    model, inputs = rnn_variant(variant), batch()
    kwargs = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], do_sample=False,
                  return_dict_in_generate=True, output_scores=True)
    once = model.generate(**kwargs, max_new_tokens=6, min_new_tokens=6)
    first = model.generate(**kwargs, max_new_tokens=2, min_new_tokens=2)
    masks = dict(decoder_attention_mask=torch.ones_like(first.sequences)) if mask == "full" else {}
    second = model.generate(**kwargs, max_new_tokens=4, min_new_tokens=4, decoder_input_ids=first.sequences,
                            **masks, **cache_field(cache_of(first)))
    assert torch.equal(second.sequences, once.sequences)
    torch.testing.assert_close(first.scores + second.scores, once.scores, atol=1e-5, rtol=0)
    check_recurrent_cache(cache_of(second), batch_size=3, length=6)


@SOME
@torch.no_grad()
def test_beam_search_through_the_generic_reordering(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beam search with the model's own reordering (the state only), with the cache's generic ``reorder_cache`` (both
    layers, transformers' fallback without ``_reorder_cache``) and without a cache gives the same beams and scores."""
    model, inputs = trained_rnn_variant(variant), batch()
    kwargs = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], num_beams=3,
                  num_return_sequences=2, max_new_tokens=7, return_dict_in_generate=True, output_scores=True)
    own = model.generate(**kwargs)
    without_cache = model.generate(**kwargs, use_cache=False)
    monkeypatch.delattr(RNNSeq2SeqForConditionalGeneration, "_reorder_cache")
    generic = model.generate(**kwargs)
    for other in (without_cache, generic):
        assert torch.equal(other.sequences, own.sequences)
        torch.testing.assert_close(other.sequences_scores, own.sequences_scores, atol=1e-5, rtol=0)


@SOME
@torch.no_grad()
def test_assisted_and_prompt_lookup_decoding_equal_greedy(variant: str) -> None:
    """Assisted decoding reads both caches (``is_croppable`` after the prefill, ``get_seq_length``, ``crop``): with the
    model as its own assistant and with another RNN, and prompt lookup, it gives greedy decoding's tokens."""
    model = trained_rnn_variant(variant)
    input_ids, attention_mask = source_batch((6,), seed=3)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10, min_new_tokens=10,
                  do_sample=False, return_dict_in_generate=True)
    greedy = model.generate(**kwargs)
    other = trained_rnn_variant("luong_general-gru" if variant != "luong_general-gru" else "bahdanau-lstm")
    for assistant in (model, other):
        assisted = model.generate(**kwargs, assistant_model=assistant)
        assert torch.equal(assisted.sequences, greedy.sequences)
        check_recurrent_cache(cache_of(assisted), batch_size=1, length=10)
    lookup = model.generate(**kwargs, prompt_lookup_num_tokens=3)
    assert torch.equal(lookup.sequences, greedy.sequences)


@pytest.mark.parametrize("mode", [dict(), dict(num_beams=3), dict(do_sample=True)], ids=["greedy", "beam", "sample"])
@torch.no_grad()
def test_plain_generation_keeps_one_state(mode: dict) -> None:
    """O(1) memory: without recording, the cache holds the latest state only, however many tokens it consumed."""
    model, inputs = rnn_variant("bahdanau-lstm"), batch()
    for length in (3, 12):
        out = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], **mode,
                             max_new_tokens=length, min_new_tokens=length, return_dict_in_generate=True)
        state = cache_of(out).state
        assert len(state.checkpoints) == 1 and not state.inputs and not state.record_past
        assert state.get_seq_length() == length


# --- inputs_embeds ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@ALL
def test_inputs_embeds_give_the_logits_of_their_ids(variant: str, tied: bool, train: bool, grad: bool) -> None:
    """Each side embedded with its own table (the decoder's is ``get_decoder().get_input_embeddings()``; with tied
    weights both are ``get_input_embeddings()``, transformers' own recipe): bitwise the logits and loss of the ids,
    in training (the same dropout seed) and evaluation. Both calls run under the same grad mode: on CPU, torch's LSTM
    takes another kernel under ``no_grad`` (oneDNN), whose last bits differ from the training kernel's."""
    model = rnn_variant(variant, tie_word_embeddings=tied, dropout=0.3).train(train)
    inputs, labels = batch(), target_batch(3, 5, seed=4)
    source = dict(attention_mask=inputs["attention_mask"], labels=labels)
    encoder_table, decoder_table = model.get_input_embeddings(), model.get_decoder().get_input_embeddings()
    assert (encoder_table.weight is decoder_table.weight) == tied
    with torch.set_grad_enabled(grad):
        outputs = []
        for embedded in ({}, {"inputs": True}, {"decoder": True}, {"inputs": True, "decoder": True}):
            ids = inputs["input_ids"], inputs["decoder_input_ids"]
            sides = dict(inputs_embeds=encoder_table(ids[0])) if embedded.get("inputs") else dict(input_ids=ids[0])
            sides |= dict(decoder_inputs_embeds=decoder_table(ids[1])) if embedded.get("decoder") else \
                dict(decoder_input_ids=ids[1])
            torch.manual_seed(0)
            outputs.append(model(**source, **sides))
    for out in outputs[1:]:
        assert torch.equal(out.logits, outputs[0].logits) and torch.equal(out.loss, outputs[0].loss)


# --- gradient checkpointing -------------------------------------------------------------------------------------------


def enable_checkpointing(model, use_reentrant: bool) -> None:
    """transformers' switch under the name every 5.x release has, ``gradient_checkpointing_enable`` (5.23 renamed it
    activation checkpointing and warns on the old name)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})


def is_checkpointing(model) -> bool:
    """transformers' answer, under the running release's name."""
    return model.is_activation_checkpointing if hasattr(model, "activation_checkpointing_enable") \
        else model.is_gradient_checkpointing


def gradients(model, **kwargs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss and the gradient of every trainable parameter, dropout drawn from seed 7."""
    inputs = batch()
    model.zero_grad()
    torch.manual_seed(7)
    loss = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                 labels=target_batch(3, 6), **kwargs).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@ALL
def test_gradient_checkpointing_gives_the_same_gradients(variant: str, dropout: float, use_reentrant: bool) -> None:
    """Without dropout, the gradients without checkpointing; with dropout, those of the same computation, the RNNs
    run layer by layer as they are for ``output_hidden_states=True`` (checkpointing draws the dropout between layers
    the same way, so that the second run of a segment draws what the first did). The reentrant variant's first run
    is under ``no_grad``, where torch's CPU LSTM kernel differs in the last bits: hence the tolerance."""
    model = rnn_variant(variant, dropout=dropout).train()
    loss, expected = gradients(model, output_hidden_states=dropout > 0)
    assert not is_checkpointing(model)
    enable_checkpointing(model, use_reentrant)
    assert is_checkpointing(model) and model.get_decoder().step.gradient_checkpointing
    checkpointed_loss, checkpointed = gradients(model)
    torch.testing.assert_close(checkpointed_loss, loss, atol=1e-6, rtol=0)
    assert checkpointed.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-7, rtol=1e-5, msg=name)
    assert all(grad.abs().sum() > 0 for grad in expected.values())


@ALL
def test_gradient_checkpointing_keeps_fewer_activations(variant: str) -> None:
    """What the backward pass keeps outside the checkpointed segments (each segment keeps its inputs only): under half
    of what it keeps without checkpointing, the attention's energies and the LSTM gates of every step included."""
    model = rnn_variant(variant, dropout=0.0).train()

    def kept_bytes() -> int:
        kept: dict[tuple, int] = {}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            kept[(tensor.data_ptr(), tensor.shape, tensor.stride())] = tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            gradients(model)
        return sum(kept.values())

    plain = kept_bytes()
    enable_checkpointing(model, use_reentrant=False)
    assert kept_bytes() < 0.5 * plain


@torch.no_grad()
def test_gradient_checkpointing_leaves_evaluation_and_generation_alone() -> None:
    model, inputs = rnn_variant("bahdanau-lstm"), batch()
    logits = model(**inputs).logits
    tokens = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], max_new_tokens=5)
    enable_checkpointing(model, use_reentrant=False)
    assert torch.equal(model(**inputs).logits, logits)
    assert torch.equal(model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                      max_new_tokens=5), tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_disable()
    assert not is_checkpointing(model) and not model.get_encoder().gradient_checkpointing


# the RNN's Linear modules per variant: attention (W_a, U_a, v_a), Luong's W_c, the bridge (W_s, W_cell); the LSTM and
# GRU stacks are torch RNN modules, which LoRA does not adapt
LORA_TARGETS = {"bahdanau-lstm": ["W_a", "U_a", "v_a", "W_s", "W_cell"],
                "luong_concat-lstm": ["W_a", "U_a", "v_a", "W_c"],
                "luong_general-nofeed-gru": ["W_a", "W_c"]}


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft asks the old name
@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("variant", list(LORA_TARGETS))
def test_one_lora_step_with_gradient_checkpointing(variant: str, use_reentrant: bool) -> None:
    """peft's LoRA with named targets and gradient checkpointing: the adapter's gradients are those without
    checkpointing, one step changes the adapter only and lowers the loss. (The reentrant variant needs the input
    embeddings to require grad; transformers' switch sets that up, as peft's recipe asks.)"""
    peft = pytest.importorskip("peft")
    config = dict(task_type="SEQ_2_SEQ_LM", target_modules=LORA_TARGETS[variant], r=4, lora_alpha=8,
                  init_lora_weights=False)
    reference = peft.get_peft_model(rnn_variant(variant, dropout=0.0).train(), peft.LoraConfig(**config))
    model = peft.get_peft_model(rnn_variant(variant, dropout=0.0).train(), peft.LoraConfig(**config))
    enable_checkpointing(model, use_reentrant)
    assert is_checkpointing(model.base_model.model)
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    _, expected = gradients(reference)
    loss, adapter = gradients(model)
    assert adapter.keys() == expected.keys() and all("lora_" in name for name in adapter)
    assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in adapter} == set(LORA_TARGETS[variant])
    for name, grad in expected.items():
        torch.testing.assert_close(adapter[name], grad, atol=1e-7, rtol=1e-5, msg=name)
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5).step()
    assert all(not torch.equal(p, before[name]) for name, p in model.named_parameters() if p.requires_grad)
    assert all(torch.equal(p, frozen[name]) for name, p in model.named_parameters() if not p.requires_grad)
    assert gradients(model)[0] < loss
