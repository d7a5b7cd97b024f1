"""generate() on the Transformer: batching, the KV cache, decoding strategies and returned attentions.

The model is the shared ``trained_tiny_transformer``: a briefly trained model whose outputs depend on the input
and end at different steps, so that batching and early stopping are really exercised.
"""

from __future__ import annotations

import copy

import pytest
import torch

from toy import BOS, EOS, PAD

MAX_NEW_TOKENS = 10


@pytest.fixture
def model(trained_tiny_transformer):
    return trained_tiny_transformer


@pytest.fixture
def sources(reverse_batch) -> tuple[torch.Tensor, torch.Tensor]:
    """6 right-padded sources of lengths 3..8 (input_ids, attention_mask)."""
    input_ids, attention_mask, _ = reverse_batch(6, torch.Generator().manual_seed(1234))
    assert attention_mask.sum(1).unique().numel() > 1  # the batch really mixes lengths
    return input_ids, attention_mask


def _until_eos(sequence: torch.Tensor) -> list[int]:
    """Generated tokens after the start token, up to and including the first EOS."""
    tokens = sequence.tolist()[1:]
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens


def test_trained_fixture_is_not_degenerate(model, sources) -> None:
    """Guards the tests below: outputs differ between inputs and some, not all, rows stop before the limit."""
    input_ids, attention_mask = sources
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    assert (out[:, 0] == BOS).all()  # decoding starts at decoder_start_token_id
    rows = [_until_eos(row) for row in out]
    assert len({tuple(r) for r in rows}) > 1
    assert len({len(r) for r in rows}) > 1
    assert any(r[-1] == EOS for r in rows)


@pytest.mark.parametrize("num_beams", [1, 3], ids=["greedy", "beam"])
def test_batched_generate_equals_one_by_one(model, sources, num_beams: int) -> None:
    input_ids, attention_mask = sources
    kwargs = dict(max_new_tokens=MAX_NEW_TOKENS, num_beams=num_beams, do_sample=False)
    batched = model.generate(input_ids, attention_mask=attention_mask, **kwargs)
    for i in range(input_ids.size(0)):
        alone = model.generate(input_ids[i : i + 1, : int(attention_mask[i].sum())], **kwargs)
        assert _until_eos(batched[i]) == _until_eos(alone[0]), f"example {i}"
        # after EOS a batched row holds only filler
        tail = batched[i, 1 + len(_until_eos(alone[0])):]
        assert set(tail.tolist()) <= {PAD, EOS}


def test_greedy_generate_equals_manual_argmax_decoding(model, sources) -> None:
    input_ids, attention_mask = sources
    generated = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=MAX_NEW_TOKENS,
                               do_sample=False)
    decoder_input_ids = torch.full((input_ids.size(0), 1), BOS)
    with torch.no_grad():
        for _ in range(MAX_NEW_TOKENS):
            logits = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                           use_cache=False).logits
            decoder_input_ids = torch.cat([decoder_input_ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    for i in range(input_ids.size(0)):
        assert _until_eos(generated[i]) == _until_eos(decoder_input_ids[i])


CACHE_CASES = {
    "greedy": {},
    "beam": dict(num_beams=3, length_penalty=0.6, early_stopping=True, num_return_sequences=2),
    "beam_never": dict(num_beams=4, length_penalty=2.0, early_stopping="never", num_return_sequences=3),
    "sample": dict(do_sample=True, temperature=1.5, top_k=6, top_p=0.95),
    "beam_sample": dict(do_sample=True, num_beams=2, temperature=1.3),
    "no_repeat_ngram": dict(no_repeat_ngram_size=2),
    "min_new_tokens": dict(min_new_tokens=7, max_new_tokens=9),
    "scores_greedy": dict(output_scores=True, return_dict_in_generate=True),
    "scores_beam": dict(num_beams=3, output_scores=True, return_dict_in_generate=True),
    "scores_sample": dict(do_sample=True, top_k=5, output_scores=True, output_logits=True,
                          return_dict_in_generate=True),
}


@pytest.mark.parametrize("case", list(CACHE_CASES))
def test_use_cache_does_not_change_generation(model, sources, case: str) -> None:
    input_ids, attention_mask = sources
    kwargs = {"max_new_tokens": MAX_NEW_TOKENS, "do_sample": False, **CACHE_CASES[case]}
    outputs = {}
    for use_cache in (True, False):
        torch.manual_seed(7)
        outputs[use_cache] = model.generate(input_ids, attention_mask=attention_mask, use_cache=use_cache, **kwargs)
    cached, uncached = outputs[True], outputs[False]
    if kwargs.get("return_dict_in_generate"):
        assert len(cached.scores) == len(uncached.scores) > 0
        for a, b in zip(cached.scores, uncached.scores, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        for a, b in zip(cached.logits or (), uncached.logits or (), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        cached, uncached = cached.sequences, uncached.sequences
    assert torch.equal(cached, uncached)
    assert cached.size(0) == input_ids.size(0) * kwargs.get("num_return_sequences", 1)
    if case == "no_repeat_ngram":
        for row in cached:
            tokens = [BOS, *_until_eos(row)]
            bigrams = list(zip(tokens, tokens[1:], strict=False))
            assert len(bigrams) == len(set(bigrams))
    if case == "min_new_tokens":
        assert cached.size(1) >= 1 + 7
        assert (cached[:, 1:8] != EOS).all()


def test_sampling_depends_on_the_seed(model, sources) -> None:
    """Makes the sampling cases above meaningful: the seed, not the model, decides the sample."""
    input_ids, attention_mask = sources
    samples = set()
    for seed in range(4):
        torch.manual_seed(seed)
        out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=MAX_NEW_TOKENS,
                             do_sample=True, temperature=1.5, top_k=6, top_p=0.95)
        samples.add(tuple(out.flatten().tolist()))
    assert len(samples) > 1


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_returns_cross_attentions(model, sources, use_cache: bool) -> None:
    input_ids, attention_mask = sources
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=5, min_new_tokens=5,
                         do_sample=False, output_attentions=True, return_dict_in_generate=True, use_cache=use_cache)
    num_layers, num_heads = model.config.decoder_layers, model.config.decoder_attention_heads
    batch, src_len = input_ids.shape
    assert len(out.encoder_attentions) == model.config.encoder_layers
    assert len(out.cross_attentions) == len(out.decoder_attentions) == 5  # one entry per generated token
    padded_key = (attention_mask == 0)[:, None, :]  # (B, 1, S)
    for step, per_layer in enumerate(out.cross_attentions):
        assert len(per_layer) == num_layers
        for weights in per_layer:
            assert weights.shape[:2] == (batch, num_heads) and weights.shape[-1] == src_len
            assert weights.size(2) == (1 if use_cache else step + 1)
            last = weights[:, :, -1]  # (B, H, S): the query of the token generated at this step
            torch.testing.assert_close(last.sum(-1), torch.ones(batch, num_heads))
            assert (last.masked_select(padded_key.expand_as(last)) == 0).all()


def test_cross_attentions_from_generate_match_with_and_without_cache(model, sources) -> None:
    input_ids, attention_mask = sources
    kwargs = dict(max_new_tokens=4, do_sample=False, output_attentions=True, return_dict_in_generate=True)
    cached = model.generate(input_ids, attention_mask=attention_mask, use_cache=True, **kwargs)
    uncached = model.generate(input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)
    for step_cached, step_uncached in zip(cached.cross_attentions, uncached.cross_attentions, strict=True):
        for a, b in zip(step_cached, step_uncached, strict=True):
            torch.testing.assert_close(a[:, :, -1], b[:, :, -1], atol=1e-5, rtol=0)


def test_generate_with_eager_attention_matches_sdpa(model, sources) -> None:
    input_ids, attention_mask = sources
    # a copy of the config: sub-modules read `config._attn_implementation`, and _from_config sets it in place
    eager = type(model)._from_config(copy.deepcopy(model.config), attn_implementation="eager").eval()
    eager.load_state_dict(model.state_dict())
    assert model.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    kwargs = dict(max_new_tokens=MAX_NEW_TOKENS, num_beams=3, do_sample=False)
    assert torch.equal(eager.generate(input_ids, attention_mask=attention_mask, **kwargs),
                       model.generate(input_ids, attention_mask=attention_mask, **kwargs))
