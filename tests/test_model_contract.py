"""transformers' model contract, for both families and every RNN variant: output flags read from the config,
``return_dict=False`` as ``to_tuple()``, ``inputs_embeds`` = ``input_ids``, hidden states and attentions that are
part of the graph, the fields ``generate`` documents, a croppable cache, continued generation, and assisted and
prompt-lookup decoding that reproduce greedy decoding token for token; activation checkpointing through transformers'
``GradientCheckpointingLayer``, as transformers' common tests ask of every model."""

from __future__ import annotations

import warnings
from unittest import mock

import pytest
import torch
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache, LinearAttentionLayer
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput

from encdec import RNNSeq2SeqConfig
from encdec.models.compat import cache_field, cache_of
from encdec.models.rnn_cache import RNNSeq2SeqCache, RNNStateLayer
from toy import (
    BOS,
    EOS,
    RNN_VARIANTS,
    TEST_TRANSFORMER,
    rnn_variant,
    source_batch,
    target_batch,
    tiny_model,
    trained_rnn_variant,
)
from toy import RANDOM_VOCAB_SIZE as VOCAB

TRANSFORMERS = {"transformer-post-ln": {}, "transformer-pre-ln": {"normalize_before": True}}
MODELS = [*TRANSFORMERS, *RNN_VARIANTS]
FLAGS = ("output_attentions", "output_hidden_states")
# one variant per decoder unrolling: token by token (Bahdanau; Luong with input feeding), fused (Luong without input
# feeding; no attention, with or without context feeding)
SOME_RNNS = ["bahdanau-lstm", "luong_general-gru", "luong_general-nofeed-gru", "none-context-lstm", "none-gru-1to2"]


def build(name: str, **overrides):
    """A tiny model in eval mode: a Transformer (eager attention, so that it returns weights) or an RNN variant;
    both share the RNN tests' vocabulary and special tokens."""
    if name in TRANSFORMERS:
        return tiny_model(TEST_TRANSFORMER, attn_implementation="eager",
                          **{"vocab_size": VOCAB, **TRANSFORMERS[name], **overrides})
    return rnn_variant(name, **overrides)


def inputs(batch: int = 3) -> dict[str, torch.Tensor]:
    input_ids, attention_mask = source_batch((5, 3, 7, 4)[:batch])
    decoder_input_ids = torch.cat([torch.full((batch, 1), BOS), target_batch(batch, 4)], dim=1)  # (B, 5)
    return dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)


def is_rnn(model) -> bool:
    return isinstance(model.config, RNNSeq2SeqConfig)


def assert_same(a, b, where: str = "output") -> None:
    """Equal field by field, nested tuples included; tensors bitwise; caches by type and length."""
    if isinstance(a, ModelOutput) or isinstance(b, ModelOutput):
        assert type(a) is type(b) and list(a.keys()) == list(b.keys()), f"{where}: {list(a.keys())} != {list(b.keys())}"
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, tuple | list):
        assert isinstance(b, tuple | list) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, Cache):
        assert type(a) is type(b) and a.get_seq_length() == b.get_seq_length(), where
    elif torch.is_tensor(a):
        assert torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# --- output flags, tuples, inputs_embeds ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
@torch.no_grad()
def test_config_flags_equal_keyword_flags(name: str) -> None:
    model = build(name)
    batch = inputs()
    encoder_batch = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    calls = {"lm": (model, batch), "base": (model.model, batch), "encoder": (model.get_encoder(), encoder_batch)}
    for flag in FLAGS:
        for where, (module, kwargs) in calls.items():
            by_keyword = module(**kwargs, **{flag: True})
            setattr(model.config, flag, True)
            try:
                by_config = module(**kwargs)
                overridden = module(**kwargs, **{flag: False})  # an explicit keyword beats the config
            finally:
                setattr(model.config, flag, False)
            assert_same(by_config, by_keyword, f"{where} {flag}")
            assert_same(overridden, module(**kwargs), f"{where} {flag}=False")
    assert cache_of(model(**batch)) is not None
    model.config.use_cache = False
    try:
        assert cache_of(model(**batch)) is None and cache_of(model.model(**batch)) is None
        assert cache_of(model(**batch, use_cache=True)) is not None
    finally:
        model.config.use_cache = True
    for where, (module, kwargs) in calls.items():
        expected = module(**kwargs).to_tuple()
        model.config.return_dict = False
        try:
            assert_same(module(**kwargs), expected, f"{where} config.return_dict=False")
            assert isinstance(module(**kwargs, return_dict=True), ModelOutput)
        finally:
            model.config.return_dict = True


@pytest.mark.parametrize("name", MODELS)
@torch.no_grad()
def test_tuple_output_equals_to_tuple(name: str) -> None:
    model = build(name)
    batch = inputs()
    flags = dict(output_attentions=True, output_hidden_states=True)
    source = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    encoder = model.get_encoder()
    for module, kwargs in [(model, dict(batch, **flags)),
                           (model, dict(source, labels=batch["decoder_input_ids"], **flags)),
                           (model.model, dict(batch, **flags)),
                           (encoder, dict(source, output_hidden_states=True))]:
        as_tuple = module(**kwargs, return_dict=False)
        assert isinstance(as_tuple, tuple)
        assert_same(as_tuple, module(**kwargs).to_tuple(), type(module).__name__)
    # the encoder's tuple is accepted back as `encoder_outputs`
    encoder_tuple = encoder(batch["input_ids"], batch["attention_mask"], output_hidden_states=True, return_dict=False)
    from_tuple = model(encoder_outputs=encoder_tuple, attention_mask=batch["attention_mask"],
                       decoder_input_ids=batch["decoder_input_ids"])
    torch.testing.assert_close(from_tuple.logits, model(**batch).logits, atol=0, rtol=0)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("name", MODELS)
@torch.no_grad()
def test_inputs_embeds_equal_input_ids(name: str, tied: bool) -> None:
    """Embeddings in place of ids give the same outputs, exactly. With tied embeddings this is transformers' own
    common check, which embeds both sides with ``model.get_input_embeddings()``; untied (the RNN papers' default),
    the decoder has its own table, ``model.get_decoder().get_input_embeddings()``, and the target is embedded with
    it."""
    model = build(name, tie_word_embeddings=tied)
    batch = inputs()
    by_ids = model(**batch, output_hidden_states=True)
    decoder_table = model.get_input_embeddings() if tied else model.get_decoder().get_input_embeddings()
    assert (model.get_input_embeddings().weight is model.get_decoder().get_input_embeddings().weight) == tied
    by_embeds = model(inputs_embeds=model.get_input_embeddings()(batch["input_ids"]),
                      attention_mask=batch["attention_mask"],
                      decoder_inputs_embeds=decoder_table(batch["decoder_input_ids"]), output_hidden_states=True)
    torch.testing.assert_close(by_embeds.logits, by_ids.logits, atol=0, rtol=0)
    torch.testing.assert_close(by_embeds.encoder_hidden_states, by_ids.encoder_hidden_states, atol=0, rtol=0)
    torch.testing.assert_close(by_embeds.decoder_hidden_states, by_ids.decoder_hidden_states, atol=0, rtol=0)
    generate = dict(attention_mask=batch["attention_mask"], max_new_tokens=5, num_beams=2, output_scores=True,
                    return_dict_in_generate=True)
    from_embeds = model.generate(inputs_embeds=model.get_input_embeddings()(batch["input_ids"]), **generate)
    from_ids = model.generate(input_ids=batch["input_ids"], **generate)
    assert torch.equal(from_embeds.sequences, from_ids.sequences)
    torch.testing.assert_close(from_embeds.sequences_scores, from_ids.sequences_scores, atol=0, rtol=0)


def test_rnn_config_maps_num_attention_heads_to_the_one_alignment() -> None:
    config = build("bahdanau-lstm").config
    assert config.num_attention_heads == 1 and config.num_hidden_layers == config.decoder_layers
    assert "num_attention_heads" not in config.to_dict()  # derived, not saved
    config.num_attention_heads = 1
    with pytest.raises(ValueError, match="num_attention_heads"):
        config.num_attention_heads = 2


# --- hidden states and attentions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
@torch.no_grad()
def test_hidden_state_counts_and_shapes(name: str) -> None:
    model = build(name)
    config = model.config
    batch = inputs()
    out = model(**batch, output_hidden_states=True, output_attentions=True)
    B, S = batch["input_ids"].shape
    T = batch["decoder_input_ids"].size(1)
    encoder, decoder = out.encoder_hidden_states, out.decoder_hidden_states
    assert len(encoder) == config.encoder_layers + 1 and len(decoder) == config.decoder_layers + 1
    assert torch.equal(encoder[-1], out.encoder_last_hidden_state)
    if is_rnn(model):
        E, H = config.embedding_dim, config.hidden_size
        assert [h.shape for h in encoder] == [(B, S, E)] + [(B, S, config.encoder_output_size)] * config.encoder_layers
        assert [h.shape for h in decoder] == [(B, T, E)] + [(B, T, H)] * config.decoder_layers
        assert out.encoder_attentions is None and out.decoder_attentions is None
        if config.attention == "none":
            assert out.cross_attentions is None
        else:
            assert [a.shape for a in out.cross_attentions] == [(B, 1, T, S)]
        if config.attention == "none" and not config.context_feeding and config.readout_size == config.output_size:
            # the softmax reads the top layer's s_t itself
            assert torch.equal(decoder[-1], model.model(**batch).last_hidden_state)
    else:
        D, heads = config.d_model, config.decoder_attention_heads
        assert all(h.shape == (B, S, D) for h in encoder) and all(h.shape == (B, T, D) for h in decoder)
        assert torch.equal(decoder[-1], model.model(**batch).last_hidden_state)
        assert [a.shape for a in out.encoder_attentions] == [(B, heads, S, S)] * config.encoder_layers
        assert [a.shape for a in out.decoder_attentions] == [(B, heads, T, T)] * config.decoder_layers
        assert [a.shape for a in out.cross_attentions] == [(B, heads, T, S)] * config.decoder_layers


@pytest.mark.parametrize("name", MODELS)
def test_gradients_reach_returned_hidden_states_and_attentions(name: str) -> None:
    model = build(name, dropout=0.1).train()
    batch = inputs()
    labels = batch.pop("decoder_input_ids")[:, 1:]
    out = model(**batch, labels=labels, output_hidden_states=True, output_attentions=True)
    returned = {f"{field}[{i}]": tensor for field in ("encoder_hidden_states", "decoder_hidden_states",
                                                      "encoder_attentions", "decoder_attentions", "cross_attentions")
                for i, tensor in enumerate(getattr(out, field) or ())}
    for tensor in returned.values():
        tensor.retain_grad()
    out.loss.backward(retain_graph=True)
    if is_rnn(model) and model.config.attention == "none":
        # without attention nothing reads the encoder's top-layer h_i: the decoder starts from its final states
        unread = returned.pop(f"encoder_hidden_states[{model.config.encoder_layers}]")
        assert unread.grad is None
    missing = [key for key, tensor in returned.items() if tensor.grad is None or not tensor.grad.abs().sum() > 0]
    assert not missing, f"no gradient reaches {missing}"
    # and the other way: a loss built on a returned tensor (attention supervision, say) trains the model
    for key, tensor in returned.items():
        model.zero_grad()
        tensor.float().pow(2).mean().backward(retain_graph=True)
        reached = sum(p.grad.abs().sum() for p in model.parameters() if p.grad is not None)
        assert reached > 0, f"a loss on {key} reaches no parameter"


@pytest.mark.parametrize("name", ["luong_general-nofeed-gru", "luong_dot-nofeed-lstm", "none-lstm"])
def test_token_by_token_outputs_get_the_gradients_of_the_fused_ones(name: str) -> None:
    """The token-by-token unrolling returns per-step outputs gathered into one tensor; its gradient must be what the
    fused unrolling (whose returned tensors the next computation reads directly) gives."""
    batch = inputs()
    labels = batch.pop("decoder_input_ids")[:, 1:]
    grads = []
    for fused in (True, False):
        model = build(name)
        step = type(model.model.decoder.step)  # `fused` is a read-only property, derived from the config
        with mock.patch.object(step, "fused", property(lambda self, fused=fused: fused)):
            out = model(**batch, labels=labels, output_hidden_states=True, output_attentions=True)
        returned = [*out.decoder_hidden_states[1:], *(out.cross_attentions or ())]
        for tensor in returned:
            tensor.retain_grad()
        out.loss.backward()
        grads.append([tensor.grad for tensor in returned])
    for fused_grad, step_grad in zip(*grads, strict=True):
        torch.testing.assert_close(step_grad, fused_grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("variant", list(RNN_VARIANTS))
@torch.no_grad()
def test_layer_by_layer_equals_fused(variant: str) -> None:
    """Hidden states make both RNNs run layer by layer; the fused stacked call stays the path otherwise."""
    model = build(variant)
    batch = inputs()
    fused = model(**batch)
    by_layer = model(**batch, output_hidden_states=True)
    # the same kernels, layer by layer: bitwise equal on the CPU
    assert torch.equal(by_layer.logits, fused.logits)
    assert torch.equal(by_layer.encoder_last_hidden_state, fused.encoder_last_hidden_state)
    encoder = model.get_encoder()
    for field in ("final_hidden_state", "final_cell_state"):
        expected = getattr(encoder(batch["input_ids"], batch["attention_mask"]), field)
        actual = getattr(encoder(batch["input_ids"], batch["attention_mask"], output_hidden_states=True), field)
        assert actual is expected is None or torch.equal(actual, expected), field


# --- generate: every documented field --------------------------------------------------------------------------------

MODES = {
    "greedy": dict(do_sample=False),
    "sample": dict(do_sample=True, top_k=5),
    "beam": dict(num_beams=2, num_return_sequences=2, do_sample=False),
    "beam_sample": dict(num_beams=2, do_sample=True),
}
STEPS = 3


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", ["transformer-pre-ln", *SOME_RNNS[:3], "none-lstm"])
@torch.no_grad()
def test_generate_fills_every_documented_field(name: str, mode: str, use_cache: bool) -> None:
    model = build(name)
    config = model.config
    batch = inputs()
    B, S = batch["input_ids"].shape
    torch.manual_seed(0)
    out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=STEPS,
                         min_new_tokens=STEPS, return_dict_in_generate=True, output_scores=True, output_logits=True,
                         output_attentions=True, output_hidden_states=True, use_cache=use_cache, **MODES[mode])
    kwargs = MODES[mode]
    rows = B * kwargs.get("num_beams", 1)  # the rows decoded at each step
    assert out.sequences.shape == (B * kwargs.get("num_return_sequences", 1), STEPS + 1)
    for field in ("scores", "logits"):
        assert [s.shape for s in out[field]] == [(rows, VOCAB)] * STEPS, field
    if "num_beams" in kwargs:
        assert out.sequences_scores.shape == out.beam_indices.shape[:1] == out.sequences.shape[:1]
    assert isinstance(cache_of(out), RNNSeq2SeqCache if is_rnn(model) else EncoderDecoderCache) or not use_cache
    if is_rnn(model):
        widths = [config.embedding_dim] + [config.encoder_output_size] * config.encoder_layers
        heads, cross_layers = 1, (1 if config.attention != "none" else 0)
        decoder_widths = [config.embedding_dim] + [config.hidden_size] * config.decoder_layers
        assert out.encoder_attentions is None and out.decoder_attentions is None
    else:
        widths = decoder_widths = [config.d_model] * (config.encoder_layers + 1)
        heads, cross_layers = config.decoder_attention_heads, config.decoder_layers
        assert [a.shape for a in out.encoder_attentions] == [(B, heads, S, S)] * config.encoder_layers
    assert [h.shape for h in out.encoder_hidden_states] == [(B, S, width) for width in widths]
    for t in range(STEPS):
        queries = 1 if use_cache else t + 1  # without the cache every step runs the whole prefix again
        assert [h.shape for h in out.decoder_hidden_states[t]] == [(rows, queries, w) for w in decoder_widths]
        if not is_rnn(model):
            expected = [(rows, heads, queries, t + 1)] * config.decoder_layers
            assert [a.shape for a in out.decoder_attentions[t]] == expected
        if cross_layers:
            assert [a.shape for a in out.cross_attentions[t]] == [(rows, heads, queries, S)] * cross_layers
        else:
            assert all(step is None for step in out.cross_attentions)


@pytest.mark.parametrize("name", ["transformer-post-ln", *SOME_RNNS])
@torch.no_grad()
def test_generated_steps_equal_one_forward_over_the_result(name: str) -> None:
    """Cached decoding = full decoding, for what ``generate`` returns besides the tokens: each step's hidden states
    and cross-attentions equal those of one forward pass over the generated sequence."""
    model = build(name)
    batch = inputs()
    out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=4,
                         min_new_tokens=4, return_dict_in_generate=True, output_attentions=True,
                         output_hidden_states=True, output_logits=True)
    full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 decoder_input_ids=out.sequences[:, :-1], output_attentions=True, output_hidden_states=True)
    torch.testing.assert_close(torch.stack(out.logits, dim=1), full.logits, atol=1e-5, rtol=0)
    for layer, expected in enumerate(full.decoder_hidden_states):
        steps = torch.cat([step[layer] for step in out.decoder_hidden_states], dim=1)
        torch.testing.assert_close(steps, expected, atol=1e-5, rtol=0)
    for layer, expected in enumerate(full.cross_attentions or ()):
        steps = torch.cat([step[layer] for step in out.cross_attentions], dim=2)
        torch.testing.assert_close(steps, expected, atol=1e-5, rtol=0)


@torch.no_grad()
def test_config_flags_do_not_change_generate() -> None:
    """generate() passes its own flags and ``return_dict=True`` to every forward: config-level flags neither break
    it nor change what it returns."""
    batch = inputs()
    kwargs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=4,
                  num_beams=2, return_dict_in_generate=True, output_attentions=True, output_hidden_states=True,
                  output_scores=True)
    for name in ("transformer-post-ln", "bahdanau-gru"):
        model = build(name)
        expected = model.generate(**kwargs)
        model.config.update(dict(output_attentions=True, output_hidden_states=True, return_dict=False))
        assert_same(model.generate(**kwargs), expected, name)


# --- the RNN cache ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def test_rnn_cache_is_a_transformers_cache() -> None:
    """The RNN's cache is transformers' kind: two recurrent-state layers (the kind its Mamba-style models use), one that
    shows the current state batch first, one with the attention's keys and values (tests/test_rnn_contract.py reads
    them as transformers' generic code does)."""
    model = build("luong_general-lstm")
    batch = inputs()
    calls = []
    attention = model.get_decoder().step.attention
    original = attention.project_keys
    attention.project_keys = lambda values: calls.append(values.shape) or original(values)
    try:
        out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=5,
                             min_new_tokens=5, num_beams=2, return_dict_in_generate=True)
    finally:
        del attention.project_keys
    cache = cache_of(out)
    state, memory = cache.layers
    assert isinstance(cache, Cache) and cache.is_linear == [True, True]
    assert isinstance(state, LinearAttentionLayer) and isinstance(memory, LinearAttentionLayer)
    assert cache.get_seq_length() == 5 and cache.is_croppable and not cache.is_compileable
    config = model.config
    assert cache.hidden.shape == cache.cell.shape == (config.decoder_layers, 3 * 2, config.hidden_size)
    assert cache.feed.shape == (3 * 2, 1, config.hidden_size)
    # transformers' fields: s_t, c_t and h~_t, batch first, the very tensors the decoder goes on from
    assert state.number_of_states == 3 and all(state.has_previous_state.values())
    for index, tensor in enumerate((cache.hidden.transpose(0, 1), cache.cell.transpose(0, 1), cache.feed)):
        assert torch.equal(state.recurrent_states[index], tensor) and tensor.size(0) == 3 * 2
    assert calls == [(3 * 2, 7, config.encoder_output_size)]  # the keys were projected once, at the first step
    encoded = model.get_encoder()(*(batch[key].repeat_interleave(2, 0) for key in ("input_ids", "attention_mask")))
    keys, values = memory.recurrent_states[0], memory.recurrent_states[1]
    torch.testing.assert_close(keys, attention.project_keys(encoded.last_hidden_state), atol=1e-6, rtol=0)
    torch.testing.assert_close(values, encoded.last_hidden_state, atol=1e-6, rtol=0)
    assert cache.keys is keys and memory.get_seq_length() == 7  # the source positions
    # beam search kept only the current state: earlier states belong to other hypotheses
    with pytest.raises(ValueError, match="beam search's reordering and `crop\\(0\\)` drop them"):
        cache.crop(-1)
    with pytest.raises(ValueError, match="minus the number of tokens"):
        cache.crop(3)
    cache.crop(0)
    assert cache.get_seq_length() == 5


@torch.no_grad()
def test_rnn_cache_counts_the_states_a_cell_has() -> None:
    """A GRU without input feeding has one state per layer, s_t; an LSTM with input feeding three."""
    batch = inputs()
    for name, count in (("bahdanau-gru", 1), ("luong_general-nofeed-gru", 1), ("none-lstm", 2), ("luong_dot-lstm", 3)):
        model = build(name)
        cache = cache_of(model(**batch, use_cache=True))
        assert cache.state.number_of_states == count == len(cache.state.recurrent_states), name
        assert torch.equal(cache.state.recurrent_states[0], cache.hidden.transpose(0, 1)), name
        assert (cache.keys is None) == (model.config.attention == "none"), name
        beams = torch.tensor([2, 0, 1])
        before = [tensor.clone() for tensor in cache.state.recurrent_states.values()]
        cache.reorder_cache(beams)
        for tensor, old in zip(cache.state.recurrent_states.values(), before, strict=True):
            assert torch.equal(tensor, old[beams]), name
        cache.reset()
        assert cache.get_seq_length() == 0 and cache.state.number_of_states == 0 and cache.keys is None


@pytest.mark.parametrize("name", ["transformer-pre-ln", *RNN_VARIANTS])
@torch.no_grad()
def test_cropping_then_continuing_equals_not_cropping(name: str) -> None:
    model = build(name)
    batch = inputs()
    target = torch.cat([batch["decoder_input_ids"], target_batch(3, 3, seed=5)], dim=1)  # (B, 8)
    encoder_outputs = model.get_encoder()(batch["input_ids"], batch["attention_mask"])
    flags = dict(output_attentions=True, output_hidden_states=True)

    def run(ids, cache):
        return model(encoder_outputs=encoder_outputs, attention_mask=batch["attention_mask"], decoder_input_ids=ids,
                     cache=cache, use_cache=True, **flags)

    def recording_cache() -> Cache:
        if not is_rnn(model):
            return EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
        cache = RNNSeq2SeqCache()
        cache.activate_past_recording()  # what assisted decoding does: keep the states that crop goes back to
        return cache

    full = run(target, None)

    def check(out, start: int) -> None:
        torch.testing.assert_close(out.logits, full.logits[:, start:], atol=1e-5, rtol=0)
        for got, expected in zip(out.decoder_hidden_states, full.decoder_hidden_states, strict=True):
            torch.testing.assert_close(got, expected[:, start:], atol=1e-5, rtol=0)
        for got, expected in zip(out.cross_attentions or (), full.cross_attentions or (), strict=True):
            torch.testing.assert_close(got, expected[:, :, start:], atol=1e-5, rtol=0)

    # into the middle of a call of several tokens (assisted decoding's verification), then twice in a row
    cache = cache_of(run(target[:, :6], recording_cache()))
    cache.crop(-2)
    assert cache.get_seq_length() == 4
    check(run(target[:, 4:], cache), 4)
    cache.crop(-5)
    cache.crop(-1)
    assert cache.get_seq_length() == 2
    check(run(target[:, 2:], cache), 2)
    # back to a token boundary of single-token calls (generate)
    cache = cache_of(run(target[:, :1], recording_cache()))
    for t in range(1, 7):
        run(target[:, t : t + 1], cache)
    cache.crop(-4)
    assert cache.get_seq_length() == 3
    check(run(target[:, 3:], cache), 3)
    cache.crop(-cache.get_seq_length())
    check(run(target, cache), 0)


@torch.no_grad()
def test_rnn_cache_keeps_only_the_latest_state_unless_recording() -> None:
    model = build("luong_general-lstm")
    batch = inputs()
    out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=6,
                         min_new_tokens=6, return_dict_in_generate=True)
    cache = cache_of(out)
    assert cache.get_seq_length() == 6 and len(cache.state.checkpoints) == 1 and not cache.state.inputs
    cache.crop(0)  # transformers calls this to mean "nothing to remove"
    with pytest.raises(ValueError, match="activate_past_recording"):
        cache.crop(-1)
    recording = RNNSeq2SeqCache()
    recording.activate_past_recording()
    model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=6,
                   min_new_tokens=6, **cache_field(recording))
    assert [length for length, _ in recording.state.checkpoints] == list(range(7))  # the start, then every token


# --- continued, assisted and prompt-lookup generation ----------------------------------------------------------------


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sample"])
@pytest.mark.parametrize("name", ["transformer-pre-ln", *SOME_RNNS])
@torch.no_grad()
def test_continued_generation_equals_one_call(name: str, do_sample: bool) -> None:
    model = build(name)
    batch = inputs()
    kwargs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=do_sample,
                  return_dict_in_generate=True, output_scores=True)
    torch.manual_seed(0)
    once = model.generate(**kwargs, max_new_tokens=6, min_new_tokens=6)
    torch.manual_seed(0)
    first = model.generate(**kwargs, max_new_tokens=4, min_new_tokens=4)
    second = model.generate(**kwargs, max_new_tokens=2, min_new_tokens=2, decoder_input_ids=first.sequences,
                            **cache_field(cache_of(first)))
    assert torch.equal(second.sequences, once.sequences)
    torch.testing.assert_close(first.scores + second.scores, once.scores, atol=1e-5, rtol=0)
    assert cache_of(second).get_seq_length() == cache_of(once).get_seq_length()


@pytest.mark.parametrize("with_mask", [False, True], ids=["no-mask", "full-mask"])
@pytest.mark.parametrize("name", ["transformer-post-ln", "bahdanau-gru", "none-lstm"])
@torch.no_grad()
def test_continuing_with_forced_tokens(name: str, with_mask: bool) -> None:
    """Continuing from a cache with forced tokens after the generated ones equals generating from the whole prefix;
    with a ``decoder_attention_mask`` over the whole prefix transformers picks the unconsumed tokens itself, without
    one encdec does."""
    model = build(name)
    batch = inputs()
    kwargs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=False,
                  return_dict_in_generate=True, output_scores=True, max_new_tokens=3, min_new_tokens=3)
    first = model.generate(**{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # the cache consumed 2 tokens
    prefix = torch.cat([first.sequences, target_batch(3, 4, seed=9)], dim=1)  # (B, 3 + 4): 5 tokens not consumed
    mask = dict(decoder_attention_mask=torch.ones_like(prefix)) if with_mask else {}
    continued = model.generate(**kwargs, decoder_input_ids=prefix, **cache_field(cache_of(first)), **mask)
    fresh = model.generate(**kwargs, decoder_input_ids=prefix)
    assert torch.equal(continued.sequences, fresh.sequences)
    torch.testing.assert_close(continued.scores, fresh.scores, atol=1e-5, rtol=0)
    assert cache_of(continued).get_seq_length() == cache_of(fresh).get_seq_length() == 9


@pytest.fixture
def rnn_crops(monkeypatch) -> dict[str, set[int]]:
    """The RNN cache layers (by id) that were cropped back at least one token, and those cropped into a call of
    several tokens (which then replays that call's first tokens)."""
    layers: dict[str, set[int]] = {"cropped": set(), "replayed": set()}
    crop = RNNStateLayer.crop

    def recording_crop(self, tokens_to_remove: int) -> None:
        before = self.get_seq_length()
        crop(self, tokens_to_remove)
        if self.get_seq_length() < before:
            layers["cropped"].add(id(self))
        if self.replay is not None:
            layers["replayed"].add(id(self))

    monkeypatch.setattr(RNNStateLayer, "crop", recording_crop)
    return layers


@pytest.mark.parametrize("variant", list(RNN_VARIANTS))
@torch.no_grad()
def test_rnn_assisted_and_prompt_lookup_decoding_equal_greedy(variant: str, rnn_crops: dict[str, set[int]]) -> None:
    model = trained_rnn_variant(variant)
    input_ids, attention_mask = source_batch((6,), seed=3)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=12, min_new_tokens=12,
                  do_sample=False)
    greedy = model.generate(**kwargs)
    drafts = {"rnn": trained_rnn_variant("bahdanau-gru" if variant != "bahdanau-gru" else "none-lstm"),
              "transformer": build("transformer-post-ln", encoder_layers=1, decoder_layers=1)}
    for family, draft in drafts.items():
        assisted = model.generate(**kwargs, assistant_model=draft, return_dict_in_generate=True)
        assert torch.equal(assisted.sequences, greedy), f"{family} draft"
        # a draft token was rejected inside a verification call: the main model's cache was cropped into it
        assert id(cache_of(assisted).state) in rnn_crops["replayed"], f"{family} draft: no crop tested"
    assert torch.equal(model.generate(**kwargs, prompt_lookup_num_tokens=3), greedy), "prompt lookup"


@torch.no_grad()
def test_transformer_assisted_and_prompt_lookup_decoding_equal_greedy(trained_tiny_transformer, reverse_batch,
                                                                     rnn_crops: dict[str, set[int]]) -> None:
    model = trained_tiny_transformer
    vocab = model.config.vocab_size
    input_ids, attention_mask, _ = reverse_batch(4, torch.Generator().manual_seed(7))
    drafts = {"transformer": build("transformer-pre-ln", vocab_size=vocab, encoder_layers=1, decoder_layers=1),
              "rnn": build("bahdanau-lstm", vocab_size=vocab)}
    for i in range(input_ids.size(0)):  # assisted decoding takes one sentence at a time
        kwargs = dict(input_ids=input_ids[i : i + 1], attention_mask=attention_mask[i : i + 1], max_new_tokens=10,
                      do_sample=False)
        greedy = model.generate(**kwargs)
        assert greedy[0, -1] == EOS or greedy.size(1) == 11
        for family, draft in drafts.items():
            assert torch.equal(model.generate(**kwargs, assistant_model=draft), greedy), f"{family} draft, row {i}"
        assert torch.equal(model.generate(**kwargs, prompt_lookup_num_tokens=2), greedy), f"prompt lookup, row {i}"
    assert rnn_crops["cropped"], "the RNN draft's cache was never cropped"


# --- activation checkpointing -----------------------------------------------------------------------------------------
# The four checks transformers' common tests make of every model that sets `supports_gradient_checkpointing`: the switch
# reaches every `GradientCheckpointingLayer` and back; `every_n_layers` counts those layers; a training step runs
# through their checkpoint function and gives every parameter a gradient; and (the invariant) the gradients are those
# without checkpointing, with either of torch's checkpoint variants.


def switch_checkpointing(model, on: bool, **kwargs) -> None:
    """``activation_checkpointing_enable``/``_disable`` (5.23 on), ``gradient_checkpointing_*`` (the floor's names)."""
    new = hasattr(model, "activation_checkpointing_enable")
    name = ("activation" if new else "gradient") + ("_checkpointing_enable" if on else "_checkpointing_disable")
    use_reentrant = kwargs.pop("use_reentrant", None)
    if use_reentrant is not None:
        kwargs[("activation" if new else "gradient") + "_checkpointing_kwargs"] = {"use_reentrant": use_reentrant}
    getattr(model, name)(**kwargs)


def is_checkpointing(model) -> bool:
    """transformers' answer, under the running release's name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return model.is_activation_checkpointing if hasattr(model, "activation_checkpointing_enable") \
            else model.is_gradient_checkpointing


def checkpointing_layers(model) -> list[GradientCheckpointingLayer]:
    return [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]


def flags(model) -> list[bool]:
    return [module.gradient_checkpointing for module in model.modules() if hasattr(module, "gradient_checkpointing")]


CHECKPOINTED = ["transformer-post-ln", "transformer-pre-ln", *SOME_RNNS]


@pytest.mark.parametrize("name", CHECKPOINTED)
def test_checkpointing_switches_every_checkpointing_layer_on_and_off(name: str) -> None:
    model = build(name)
    assert model.supports_gradient_checkpointing and checkpointing_layers(model)
    assert not is_checkpointing(model) and not any(flags(model))
    switch_checkpointing(model, True)
    assert is_checkpointing(model) and all(flags(model))
    assert all(callable(layer._gradient_checkpointing_func) for layer in checkpointing_layers(model))
    switch_checkpointing(model, False)
    assert not is_checkpointing(model) and not any(flags(model))


@pytest.mark.parametrize("name", CHECKPOINTED)
def test_every_n_layers_counts_the_checkpointing_layers(name: str) -> None:
    model = build(name)
    switch_checkpointing(model, True, every_n_layers=2)
    layers = checkpointing_layers(model)
    assert len(layers) >= 2 and [layer.gradient_checkpointing for layer in layers] == \
        [index % 2 == 0 for index in range(len(layers))]


def training_gradients(model, **kwargs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One training forward and backward with labels: the loss and every parameter's gradient."""
    batch = inputs()
    model.train().zero_grad()
    loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 labels=batch["decoder_input_ids"][:, 1:], **kwargs).loss
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("use_reentrant", [None, False, True], ids=["default", "non-reentrant", "reentrant"])
@pytest.mark.parametrize("name", CHECKPOINTED)
def test_training_runs_through_the_checkpointing_layers(name: str, use_reentrant: bool | None) -> None:
    """What transformers' ``test_training_gradient_checkpointing`` (and its ``_use_reentrant``, ``_use_reentrant_false``
    and ``_use_reentrant_true`` variants) asks: a training step with checkpointing on gives every parameter a
    gradient; and here besides, that the step ran through the ``GradientCheckpointingLayer``s' checkpoint function."""
    model = build(name)
    switch_checkpointing(model, True, use_reentrant=use_reentrant)
    calls = []
    for layer in checkpointing_layers(model):
        def counted(*args, function=layer._gradient_checkpointing_func, **kwargs):
            calls.append(1)
            return function(*args, **kwargs)
        layer._gradient_checkpointing_func = counted
    _, grads = training_gradients(model)
    assert calls and all(grad is not None for grad in grads.values()), [n for n, g in grads.items() if g is None]


@pytest.mark.parametrize("every_n_layers", [1, 2])
@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("name", CHECKPOINTED)
def test_checkpointing_gives_the_gradients_without_it(name: str, use_reentrant: bool, every_n_layers: int) -> None:
    """Without dropout, the loss and gradients with checkpointing (every layer, or every other) are those without.
    The reentrant variant's first run is under ``no_grad``, where torch's CPU LSTM kernel differs in the last bits."""
    model = build(name, dropout=0.0)
    loss, expected = training_gradients(model)
    switch_checkpointing(model, True, use_reentrant=use_reentrant, every_n_layers=every_n_layers)
    checkpointed_loss, checkpointed = training_gradients(model)
    torch.testing.assert_close(checkpointed_loss, loss, atol=1e-6, rtol=0)
    for parameter, grad in expected.items():
        torch.testing.assert_close(checkpointed[parameter], grad, atol=1e-7, rtol=1e-5, msg=parameter)
