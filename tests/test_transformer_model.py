"""TransformerSeq2Seq forward pass: caching, attention backends, padding, outputs, loss, embeddings, precision."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from encdec import TransformerSeq2SeqForConditionalGeneration
from encdec.models.compat import cache_of
from toy import MARIAN_IDS, MARIAN_SWITCHES, random_logits_bias

ATOL = 1e-5


def _source_and_target(vocab_size: int = 24) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of 3 with right padding on both sides: source lengths 7, 4, 6; target lengths 6, 3, 5."""
    input_ids = torch.randint(3, vocab_size, (3, 7))
    attention_mask = torch.ones(3, 7, dtype=torch.long)
    attention_mask[1, 4:] = 0
    attention_mask[2, 6:] = 0
    decoder_input_ids = torch.randint(3, vocab_size, (3, 6))
    decoder_input_ids[:, 0] = 1
    decoder_attention_mask = torch.ones(3, 6, dtype=torch.long)
    decoder_attention_mask[1, 3:] = 0
    decoder_attention_mask[2, 5:] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    decoder_input_ids = decoder_input_ids.masked_fill(decoder_attention_mask == 0, 0)
    return input_ids, attention_mask, decoder_input_ids, decoder_attention_mask


def _twin(model: TransformerSeq2SeqForConditionalGeneration, attn_implementation: str
          ) -> TransformerSeq2SeqForConditionalGeneration:
    """The same weights under another attention backend."""
    # a copy of the config: sub-modules read `config._attn_implementation`, and _from_config sets it in place
    twin = TransformerSeq2SeqForConditionalGeneration._from_config(copy.deepcopy(model.config),
                                                                    attn_implementation=attn_implementation)
    twin.load_state_dict(model.state_dict())
    assert twin.config._attn_implementation == attn_implementation
    assert model.config._attn_implementation != attn_implementation
    return twin.eval()


# ---------------------------------------------------------------------------------------------------------- cache


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("position_embedding_type", ["sinusoidal", "learned"])
@pytest.mark.parametrize("normalize_before", [False, True], ids=["post_ln", "pre_ln"])
def test_incremental_decoding_matches_teacher_forcing(make_transformer, normalize_before: bool,
                                                      position_embedding_type: str, attn_implementation: str) -> None:
    model = make_transformer(attn_implementation, normalize_before=normalize_before,
                             position_embedding_type=position_embedding_type)
    input_ids, attention_mask, decoder_input_ids, _ = _source_and_target()
    with torch.no_grad():
        full = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                     use_cache=False).logits  # (B, T, V)
        encoder_outputs = model.get_encoder()(input_ids, attention_mask)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        steps = []
        for t in range(decoder_input_ids.size(1)):
            out = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                        decoder_input_ids=decoder_input_ids[:, t:t + 1], cache=cache, use_cache=True)
            assert cache_of(out) is cache
            assert cache.get_seq_length() == t + 1
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_cached_decoding_in_chunks_matches_teacher_forcing(make_transformer, attn_implementation: str) -> None:
    """A prefix of 2 tokens, then 3 at once, then 1: the causal mask must be offset by the cached length."""
    model = make_transformer(attn_implementation)
    input_ids, attention_mask, decoder_input_ids, _ = _source_and_target()
    with torch.no_grad():
        full = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                     use_cache=False).logits
        cache, chunks = None, []
        for start, end in ((0, 2), (2, 5), (5, 6)):
            out = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids[:, start:end],
                        cache=cache, use_cache=True)
            cache = cache_of(out)
            chunks.append(out.logits)
    assert isinstance(cache, EncoderDecoderCache)
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------ attention backends


@pytest.mark.parametrize("normalize_before", [False, True], ids=["post_ln", "pre_ln"])
def test_eager_and_sdpa_agree_with_padding(make_transformer, normalize_before: bool) -> None:
    eager = make_transformer("eager", normalize_before=normalize_before)
    sdpa = _twin(eager, "sdpa")
    input_ids, attention_mask, decoder_input_ids, decoder_attention_mask = _source_and_target()
    kwargs = dict(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                  decoder_attention_mask=decoder_attention_mask)
    with torch.no_grad():
        out_eager = eager(input_ids, **kwargs)
        out_sdpa = sdpa(input_ids, **kwargs)
    torch.testing.assert_close(out_sdpa.encoder_last_hidden_state, out_eager.encoder_last_hidden_state,
                               atol=ATOL, rtol=0)
    torch.testing.assert_close(out_sdpa.logits, out_eager.logits, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------------- padding


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_source_padding_does_not_change_logits(make_transformer, attn_implementation: str) -> None:
    model = make_transformer(attn_implementation)
    short = torch.tensor([[5, 6, 7, 8]])
    longer = torch.tensor([[9, 10, 11, 12, 13, 14, 15], [16, 17, 18, 19, 20, 21, 22]])
    decoder_input_ids = torch.tensor([[1, 4, 9, 3]])
    batch = torch.cat([nn.functional.pad(short, (0, 3), value=0), longer])
    attention_mask = (torch.arange(7) < torch.tensor([[4], [7], [7]])).long()
    with torch.no_grad():
        alone = model(short, decoder_input_ids=decoder_input_ids).logits
        batched = model(batch, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids.expand(3, -1)).logits
    torch.testing.assert_close(batched[:1], alone, atol=ATOL, rtol=0)
    # the mask matters: attending to the padding gives other logits
    with torch.no_grad():
        unmasked = model(batch[:1], decoder_input_ids=decoder_input_ids).logits
    assert not torch.allclose(unmasked, alone, atol=1e-3)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_target_right_padding_does_not_change_logits(make_transformer, attn_implementation: str) -> None:
    model = make_transformer(attn_implementation)
    input_ids = torch.tensor([[5, 6, 7, 8, 9]]).expand(2, -1)
    short = torch.tensor([1, 4, 9])
    decoder_input_ids = torch.stack([nn.functional.pad(short, (0, 3), value=0), torch.tensor([1, 3, 8, 10, 11, 12])])
    decoder_attention_mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1] * 6])
    with torch.no_grad():
        alone = model(input_ids[:1], decoder_input_ids=short[None]).logits
        batched = model(input_ids, decoder_input_ids=decoder_input_ids,
                        decoder_attention_mask=decoder_attention_mask).logits
    torch.testing.assert_close(batched[:1, :3], alone, atol=ATOL, rtol=0)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_fully_padded_row_is_finite_and_leaves_the_others_unchanged(make_transformer,
                                                                     attn_implementation: str) -> None:
    model = make_transformer(attn_implementation)
    input_ids, attention_mask, decoder_input_ids, decoder_attention_mask = _source_and_target()
    padded = (torch.zeros_like(input_ids[:1]), torch.zeros_like(attention_mask[:1]),
              torch.zeros_like(decoder_input_ids[:1]), torch.zeros_like(decoder_attention_mask[:1]))
    with_empty = [torch.cat([a, b]) for a, b in zip((input_ids, attention_mask, decoder_input_ids,
                                                     decoder_attention_mask), padded, strict=True)]
    with torch.no_grad():
        reference = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                          decoder_attention_mask=decoder_attention_mask).logits
        out = model(with_empty[0], attention_mask=with_empty[1], decoder_input_ids=with_empty[2],
                    decoder_attention_mask=with_empty[3])
    assert torch.isfinite(out.encoder_last_hidden_state).all()
    assert torch.isfinite(out.logits).all()
    torch.testing.assert_close(out.logits[:3], reference, atol=ATOL, rtol=0)


# --------------------------------------------------------------------------------------- attentions, hidden states


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_output_attentions_and_hidden_states(make_transformer, attn_implementation: str) -> None:
    model = make_transformer(attn_implementation, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4)
    input_ids, attention_mask, decoder_input_ids, decoder_attention_mask = _source_and_target()
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                    decoder_attention_mask=decoder_attention_mask, output_attentions=True, output_hidden_states=True)
    batch, src_len = input_ids.shape
    tgt_len = decoder_input_ids.size(1)
    assert len(out.encoder_attentions) == 1 and len(out.encoder_hidden_states) == 2
    assert len(out.decoder_attentions) == 2 and len(out.cross_attentions) == 2 and len(out.decoder_hidden_states) == 3
    assert all(h.shape == (batch, src_len, 16) for h in out.encoder_hidden_states)
    assert all(h.shape == (batch, tgt_len, 16) for h in out.decoder_hidden_states)
    assert out.encoder_attentions[0].shape == (batch, 4, src_len, src_len)
    assert all(a.shape == (batch, 2, tgt_len, tgt_len) for a in out.decoder_attentions)
    assert all(a.shape == (batch, 2, tgt_len, src_len) for a in out.cross_attentions)
    source_pad = (attention_mask == 0)[:, None, None, :]  # (B, 1, 1, S)
    target_pad = (decoder_attention_mask == 0)[:, None, None, :]  # (B, 1, 1, T)
    future = torch.ones(tgt_len, tgt_len, dtype=torch.bool).triu(1)  # (T, T)
    for weights in (*out.encoder_attentions, *out.cross_attentions):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights.masked_select(source_pad.expand_as(weights)) == 0).all()
    for weights in out.decoder_attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights[..., future] == 0).all()
        # a real (non-padded) query never looks at a padded key
        real_query = (decoder_attention_mask == 1)[:, None, :, None]  # (B, 1, T, 1)
        assert (weights.masked_select(real_query & target_pad) == 0).all()
    # post-LN: the last per-layer state is the stack's output
    torch.testing.assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)


def test_output_attentions_does_not_change_logits(make_transformer) -> None:
    model = make_transformer("sdpa")
    input_ids, attention_mask, decoder_input_ids, _ = _source_and_target()
    with torch.no_grad():
        plain = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        verbose = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                        output_attentions=True)
    assert plain.cross_attentions is None and plain.encoder_attentions is None
    torch.testing.assert_close(verbose.logits, plain.logits, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------------ positions


def test_sinusoids_follow_the_paper(make_transformer) -> None:
    model = make_transformer(d_model=16)
    table = model.get_encoder().embeddings.embed_positions(0, 10)  # (10, D)
    pos, i = 7, 3
    angle = pos / 10000 ** (2 * i / 16)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    half = make_transformer(d_model=16, sinusoid_layout="half_split").get_encoder().embeddings.embed_positions(0, 10)
    assert half[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert half[pos, 8 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_positions_extend_past_the_table(make_transformer) -> None:
    short_table = make_transformer(max_position_embeddings=4)
    long_table = make_transformer(max_position_embeddings=64)
    long_table.load_state_dict(short_table.state_dict())  # the sinusoid table is not in the state dict
    input_ids = torch.randint(3, 24, (2, 9))
    decoder_input_ids = torch.randint(3, 24, (2, 7))
    with torch.no_grad():
        a = short_table(input_ids, decoder_input_ids=decoder_input_ids).logits
        b = long_table(input_ids, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def test_learned_positions_refuse_too_long_inputs(make_transformer) -> None:
    model = make_transformer(position_embedding_type="learned", max_position_embeddings=6)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.randint(3, 24, (1, 7)), decoder_input_ids=torch.ones(1, 2, dtype=torch.long))


# ------------------------------------------------------------------------------------------------------------ loss


def test_loss_ignores_minus_100_and_equals_manual_cross_entropy(make_transformer) -> None:
    model = make_transformer()
    input_ids, attention_mask, _, _ = _source_and_target()
    labels = torch.randint(3, 24, (3, 5))
    labels[1, 2:] = -100
    labels[2, 4:] = -100
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, labels=labels)
    keep = labels != -100
    manual = nn.functional.cross_entropy(out.logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, manual)
    # the ignored positions do not matter, whatever their logits
    other = labels.masked_fill(~keep, -100)
    with torch.no_grad():
        again = model(input_ids, attention_mask=attention_mask, labels=other,
                      decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels)).loss
    torch.testing.assert_close(again, out.loss)


def test_num_items_in_batch_gives_sum_over_num_items(make_transformer) -> None:
    model = make_transformer()
    input_ids, attention_mask, _, _ = _source_and_target()
    labels = torch.randint(3, 24, (3, 5))
    labels[1, 3:] = -100
    with torch.no_grad():
        mean = model(input_ids, attention_mask=attention_mask, labels=labels).loss
        scaled = model(input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=40).loss
        as_tensor = model(input_ids, attention_mask=attention_mask, labels=labels,
                          num_items_in_batch=torch.tensor(40)).loss
    num_tokens = int((labels != -100).sum())
    torch.testing.assert_close(scaled, mean * num_tokens / 40)
    torch.testing.assert_close(as_tensor, scaled)


def test_prepare_decoder_input_ids_from_labels(make_transformer) -> None:
    model = make_transformer(pad_token_id=0, decoder_start_token_id=1)
    labels = torch.tensor([[7, 8, 9, 2], [5, 2, -100, -100]])
    expected = torch.tensor([[1, 7, 8, 9], [1, 5, 2, 0]])
    assert torch.equal(model.prepare_decoder_input_ids_from_labels(labels), expected)
    assert torch.equal(labels, torch.tensor([[7, 8, 9, 2], [5, 2, -100, -100]]))  # not modified in place
    other = make_transformer(pad_token_id=3, decoder_start_token_id=2)
    assert torch.equal(other.prepare_decoder_input_ids_from_labels(labels),
                       torch.tensor([[2, 7, 8, 9], [2, 5, 2, 3]]))


def test_labels_alone_equal_explicit_shifted_decoder_inputs(make_transformer) -> None:
    model = make_transformer()
    input_ids, attention_mask, _, _ = _source_and_target()
    labels = torch.randint(3, 24, (3, 5))
    with torch.no_grad():
        implicit = model(input_ids, attention_mask=attention_mask, labels=labels)
        explicit = model(input_ids, attention_mask=attention_mask,
                         decoder_input_ids=torch.cat([torch.ones(3, 1, dtype=torch.long), labels[:, :-1]], 1))
    torch.testing.assert_close(implicit.logits, explicit.logits, atol=0, rtol=0)
    assert cache_of(implicit) is None  # training forward keeps no cache


# ------------------------------------------------------------------------------------------------------ embeddings


def test_tied_and_untied_embeddings(make_transformer) -> None:
    tied = make_transformer(tie_word_embeddings=True)
    shared = tied.get_input_embeddings().weight
    assert tied.get_output_embeddings().weight is shared
    assert tied.get_decoder().embeddings.embed_tokens.weight is shared
    untied = make_transformer(tie_word_embeddings=False)
    weights = [untied.get_input_embeddings().weight, untied.get_output_embeddings().weight,
               untied.get_decoder().embeddings.embed_tokens.weight]
    assert len({w.data_ptr() for w in weights}) == 3


def test_padding_embedding_row_starts_at_zero(make_transformer) -> None:
    model = make_transformer()
    assert torch.count_nonzero(model.get_input_embeddings().weight[0]) == 0
    assert torch.count_nonzero(model.get_input_embeddings().weight[1]) > 0


@pytest.mark.parametrize("tie", [True, False])
def test_resize_token_embeddings(make_transformer, tie: bool) -> None:
    model = make_transformer(tie_word_embeddings=tie)
    old_input = model.get_input_embeddings().weight.detach().clone()
    old_output = model.get_output_embeddings().weight.detach().clone()
    model.resize_token_embeddings(30)
    assert model.config.vocab_size == 30
    embed, decoder_embed, head = (model.get_input_embeddings(), model.get_decoder().embeddings.embed_tokens,
                                  model.get_output_embeddings())
    assert embed.weight.shape == decoder_embed.weight.shape == head.weight.shape == (30, 16)
    torch.testing.assert_close(embed.weight[:24], old_input, atol=0, rtol=0)
    torch.testing.assert_close(head.weight[:24], old_output, atol=0, rtol=0)
    same = {embed.weight.data_ptr(), decoder_embed.weight.data_ptr(), head.weight.data_ptr()}
    assert len(same) == (1 if tie else 3)
    with torch.no_grad():
        logits = model(torch.tensor([[29, 25, 4]]), decoder_input_ids=torch.tensor([[1, 28]])).logits
    assert logits.shape == (1, 2, 30) and torch.isfinite(logits).all()


def test_set_input_embeddings(make_transformer) -> None:
    model = make_transformer(tie_word_embeddings=True)
    new = nn.Embedding(24, 16, padding_idx=0)
    model.set_input_embeddings(new)
    model.tie_weights()
    assert model.get_input_embeddings() is new
    assert model.get_decoder().embeddings.embed_tokens is new
    assert model.get_output_embeddings().weight is new.weight
    untied = make_transformer(tie_word_embeddings=False)
    decoder_embed = untied.get_decoder().embeddings.embed_tokens
    untied.set_input_embeddings(new)
    assert untied.get_input_embeddings() is new
    assert untied.get_decoder().embeddings.embed_tokens is decoder_embed


# ------------------------------------------------------------------------------------------------ training details


@pytest.mark.parametrize("normalize_before", [False, True], ids=["post_ln", "pre_ln"])
def test_gradient_checkpointing_gives_the_same_gradients(make_transformer, normalize_before: bool) -> None:
    model = make_transformer(normalize_before=normalize_before).train()
    input_ids, attention_mask, _, _ = _source_and_target()
    labels = torch.randint(3, 24, (3, 5))

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    reference = gradients()
    # `activation_checkpointing_enable` is the name from transformers 5.x on; older 5.x only has the v4 name
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    assert all(layer.gradient_checkpointing for layer in model.get_decoder().layers)
    checkpointed = gradients()
    assert reference.keys() == checkpointed.keys()
    for name, grad in reference.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)
    assert any(g.abs().sum() > 0 for g in reference.values())


def test_dropout_is_active_in_train_mode_only(make_transformer) -> None:
    model = make_transformer(dropout=0.3)
    input_ids, attention_mask, decoder_input_ids, _ = _source_and_target()
    kwargs = dict(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    with torch.no_grad():
        assert torch.equal(model(input_ids, **kwargs).logits, model(input_ids, **kwargs).logits)
        model.train()
        assert not torch.equal(model(input_ids, **kwargs).logits, model(input_ids, **kwargs).logits)


def test_bf16_forward_and_backward(make_transformer) -> None:
    model = make_transformer()
    input_ids, attention_mask, _, _ = _source_and_target()
    labels = torch.randint(3, 24, (3, 5))
    with torch.no_grad():
        fp32_loss = model(input_ids, attention_mask=attention_mask, labels=labels).loss
    model.to(torch.bfloat16).train()
    out = model(input_ids, attention_mask=attention_mask, labels=labels)
    assert out.logits.dtype == torch.bfloat16
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and g.dtype == torch.bfloat16 and torch.isfinite(g).all() for g in grads)
    assert out.loss.float().item() == pytest.approx(fp32_loss.item(), rel=0.05)


def test_base_model_returns_decoder_states(make_transformer) -> None:
    model = make_transformer()
    input_ids, attention_mask, decoder_input_ids, _ = _source_and_target()
    with torch.no_grad():
        base = model.model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        full = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    assert base.last_hidden_state.shape == (3, 6, 16)
    torch.testing.assert_close(model.lm_head(base.last_hidden_state), full.logits, atol=0, rtol=0)


# ------------------------------------------------------------------------ Marian's switches (`encdec import`)


def test_the_logits_bias_is_added_to_the_logits(make_transformer) -> None:
    """logits(with bias b) - logits(with b = 0) = b at every position, and a new model's b is 0."""
    model = make_transformer(**MARIAN_SWITCHES, **MARIAN_IDS)
    assert model.final_logits_bias.shape == (1, 24) and not model.final_logits_bias.any()
    input_ids, attention_mask, decoder_input_ids, _ = _source_and_target()
    with torch.no_grad():
        plain = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        bias = random_logits_bias(model).final_logits_bias  # (1, V)
        biased = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(biased - plain, bias.expand_as(plain), atol=1e-6, rtol=0)
    assert "final_logits_bias" not in dict(model.named_parameters())  # a buffer: not trained, as in MarianMTModel
    assert make_transformer().final_logits_bias is None


def test_resize_token_embeddings_keeps_the_logits_bias_in_step(make_transformer) -> None:
    """One bias a token: kept for the tokens kept, 0 for new ones, and still saved with the weights."""
    model = random_logits_bias(make_transformer(**MARIAN_SWITCHES, **MARIAN_IDS))
    before = model.final_logits_bias.clone()
    model.resize_token_embeddings(30)
    assert model.final_logits_bias.shape == (1, 30) and "final_logits_bias" in model.state_dict()
    assert torch.equal(model.final_logits_bias[:, :24], before) and not model.final_logits_bias[:, 24:].any()
    with torch.no_grad():
        logits = model(torch.tensor([[29, 25, 4]]), decoder_input_ids=torch.tensor([[0, 28]])).logits
    assert logits.shape == (1, 2, 30) and torch.isfinite(logits).all()
    model.resize_token_embeddings(20)
    assert torch.equal(model.final_logits_bias, before[:, :20])


@pytest.mark.parametrize("name", ["swish", "silu"])
def test_swish_is_x_times_sigmoid_x(make_transformer, name: str) -> None:
    """The FFN of a swish model (Marian's activation): W_2 (h * sigmoid(h)) + b_2 with h = x W_1 + b_1."""
    ffn = make_transformer(activation_function=name).get_encoder().layers[0].ffn
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        hidden = ffn.fc1(x)
        torch.testing.assert_close(ffn(x), ffn.fc2(hidden * torch.sigmoid(hidden)), atol=1e-6, rtol=0)
