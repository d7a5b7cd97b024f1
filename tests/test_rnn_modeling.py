"""Invariants of the LSTM/GRU encoder-decoder: cached = full decoding, padding and batching change nothing, beam
search with and without the cache agree, alignments are proper distributions, every parameter trains, and
save/load (also through remote code, without the package) is exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModel, AutoModelForSeq2SeqLM  # noqa: E402

from encdec import RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel  # noqa: E402
from encdec.models.compat import cache_of  # noqa: E402
from encdec.models.modeling_rnn_seq2seq import RNNSeq2SeqCache  # noqa: E402
from toy import (  # noqa: E402
    BOS,
    PAD,
    RNN_VARIANTS,
    rnn_variant,
    source_batch,
    target_batch,
    trained_rnn_variant,
)
from toy import RANDOM_VOCAB_SIZE as VOCAB  # noqa: E402

ALL = pytest.mark.parametrize("variant", list(RNN_VARIANTS))


@ALL
@torch.no_grad()
def test_cached_steps_equal_full_forward(variant: str) -> None:
    model = rnn_variant(variant)
    input_ids, attention_mask = source_batch()
    decoder_input_ids = torch.cat([torch.full((3, 1), BOS), target_batch(3, 5)], dim=1)  # (B, 6)
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                 use_cache=False).logits
    encoder_outputs = model.get_encoder()(input_ids, attention_mask)
    cache, steps = None, []
    for t in range(decoder_input_ids.size(1)):
        out = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                    decoder_input_ids=decoder_input_ids[:, t : t + 1], cache=cache, use_cache=True)
        cache = cache_of(out)
        steps.append(out.logits)
    assert isinstance(cache, RNNSeq2SeqCache) and cache.get_seq_length() == decoder_input_ids.size(1)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    # a cache over a prefix, then the rest in one call, is the same too
    half = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                 decoder_input_ids=decoder_input_ids[:, :2], use_cache=True)
    rest = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                 decoder_input_ids=decoder_input_ids[:, 2:], cache=cache_of(half))
    torch.testing.assert_close(torch.cat([half.logits, rest.logits], dim=1), full, atol=1e-5, rtol=0)


@ALL
@torch.no_grad()
def test_padding_and_batching_change_nothing(variant: str) -> None:
    model = rnn_variant(variant)
    lengths = (5, 3, 7)
    input_ids, attention_mask = source_batch(lengths, extra_padding=2)
    targets = [target_batch(1, n, seed=10 + i)[0] for i, n in enumerate((4, 6, 2))]
    labels = torch.full((3, 6), -100)
    for i, target in enumerate(targets):
        labels[i, : len(target)] = target
    batch = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, output_attentions=True)
    encoder_out = model.get_encoder()(input_ids, attention_mask).last_hidden_state  # (B, S, De)
    for i, (length, target) in enumerate(zip(lengths, targets, strict=True)):
        assert torch.all(encoder_out[i, length:] == 0), "encoder outputs at padded positions must be zero"
        single = model(input_ids=input_ids[i : i + 1, :length], labels=target[None], output_attentions=True)
        torch.testing.assert_close(batch.logits[i, : len(target)], single.logits[0], atol=1e-5, rtol=0)
        if batch.cross_attentions is not None:
            torch.testing.assert_close(batch.cross_attentions[0][i, :, : len(target), :length],
                                       single.cross_attentions[0][0], atol=1e-6, rtol=0)
    # the loss over the padded batch is the token-weighted mean of the single losses
    singles = [model(input_ids=input_ids[i : i + 1, :n], labels=t[None]).loss * len(t)
               for i, (n, t) in enumerate(zip(lengths, targets, strict=True))]
    torch.testing.assert_close(batch.loss, sum(singles) / sum(len(t) for t in targets), atol=1e-5, rtol=0)


@ALL
@torch.no_grad()
def test_alignments_are_distributions_that_ignore_padding(variant: str) -> None:
    model = rnn_variant(variant)
    input_ids, attention_mask = source_batch((5, 3, 7))
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=target_batch(3, 4), output_attentions=True)
    if model.config.attention == "none":
        assert out.cross_attentions is None
        return
    (weights,) = out.cross_attentions
    assert weights.shape == (3, 1, 4, 7)
    check_alignment(weights, attention_mask)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4, min_new_tokens=4,
                  return_dict_in_generate=True, output_attentions=True)
    for num_beams in (1, 2):
        generated = model.generate(num_beams=num_beams, **kwargs)
        assert len(generated.cross_attentions) == 4
        for step in generated.cross_attentions:
            (step_weights,) = step
            assert step_weights.shape == (3 * num_beams, 1, 1, 7)
            check_alignment(step_weights, attention_mask.repeat_interleave(num_beams, dim=0))


def check_alignment(weights: torch.Tensor, attention_mask: torch.Tensor) -> None:
    """:param weights: (B, 1, T, S) :param attention_mask: (B, S)"""
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6, rtol=0)
    padding = attention_mask[:, None, None, :].expand_as(weights) == 0
    assert torch.all(weights[padding] == 0), "attention weights on padding must be exactly zero"


@ALL
@torch.no_grad()
def test_beam_search_with_cache_equals_without(variant: str) -> None:
    model = trained_rnn_variant(variant)
    input_ids, attention_mask = source_batch((5, 3, 7, 2))
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, num_return_sequences=2,
                  max_new_tokens=9, do_sample=False, output_scores=True, return_dict_in_generate=True)
    cached = model.generate(use_cache=True, **kwargs)
    uncached = model.generate(use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-5, rtol=0)
    greedy = [model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=9, use_cache=c)
              for c in (True, False)]
    assert torch.equal(*greedy)


@pytest.mark.parametrize("variant", ["bahdanau-lstm", "luong_general-nofeed-gru", "none-lstm"])
@torch.no_grad()
def test_each_cached_generate_step_runs_one_decoder_step(variant: str) -> None:
    model = rnn_variant(variant)
    input_ids, attention_mask = source_batch((5, 3, 7))
    seen: list[int] = []
    hook = model.get_decoder().register_forward_pre_hook(lambda module, args: seen.append(args[0].size(1)))
    try:
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, min_new_tokens=5,
                       num_beams=2)
        assert seen == [1] * 5  # the start token, then one new token per step
        seen.clear()
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, min_new_tokens=5,
                       num_beams=2, use_cache=False)
        assert seen == [1, 2, 3, 4, 5]  # without the cache, the whole prefix again from the start
    finally:
        hook.remove()


@pytest.mark.parametrize("variant", ["bahdanau-gru", "luong_concat-lstm", "none-gru-1to2"])
@torch.no_grad()
def test_generate_modes_run(variant: str) -> None:
    model = trained_rnn_variant(variant)
    input_ids, attention_mask = source_batch((5, 3, 7))
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5)
    modes = {
        "greedy": dict(do_sample=False),
        "beam": dict(num_beams=3, do_sample=False, num_return_sequences=2),
        "sample": dict(do_sample=True, top_k=5, temperature=0.9),
        "beam_sample": dict(do_sample=True, num_beams=2),
    }
    for name, kwargs in modes.items():
        torch.manual_seed(0)
        sequences = model.generate(**inputs, **kwargs)
        rows = 3 * kwargs.get("num_return_sequences", 1)
        assert sequences.shape[0] == rows and 2 <= sequences.shape[1] <= 6, name
        assert torch.all(sequences[:, 0] == BOS), name


@ALL
def test_every_parameter_gets_a_gradient(variant: str) -> None:
    model = rnn_variant(variant, dropout=0.1).train()
    input_ids, attention_mask = source_batch((5, 3, 7))
    model(input_ids=input_ids, attention_mask=attention_mask, labels=target_batch(3, 4)).loss.backward()
    unused = [name for name, param in model.named_parameters() if param.grad is None]
    assert not unused, f"parameters without a gradient: {unused}"


def test_loss_normalisation_and_label_shifting() -> None:
    model = rnn_variant("luong_general-lstm")
    input_ids, attention_mask = source_batch((5, 3, 7))
    labels = target_batch(3, 4)
    labels[1, 2:] = -100
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    assert decoder_input_ids[:, 0].eq(BOS).all() and torch.equal(decoder_input_ids[0, 1:], labels[0, :-1])
    assert decoder_input_ids[1, 3] == PAD
    mean = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    summed = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=20).loss
    torch.testing.assert_close(summed, mean * (labels != -100).sum() / 20)
    assert RNNSeq2SeqForConditionalGeneration.accepts_loss_kwargs


def test_weight_tying_and_embedding_accessors() -> None:
    tied = rnn_variant("bahdanau-tied-unidirectional")
    embedding = tied.get_input_embeddings()
    assert tied.get_output_embeddings().weight is embedding.weight
    assert tied.get_decoder().embed_tokens.weight is embedding.weight
    assert tied.get_decoder().output_projection is not None  # [s_t; c_t] is 12 + 12 wide, E is 8
    assert rnn_variant("luong_general-tied-noproj").get_decoder().output_projection is None  # h̃_t is E wide
    untied = rnn_variant("bahdanau-lstm")
    assert untied.get_output_embeddings().weight is not untied.get_input_embeddings().weight
    assert untied.get_decoder().embed_tokens.weight is not untied.get_input_embeddings().weight


@pytest.mark.parametrize("variant", ["bahdanau-lstm", "bahdanau-tied-unidirectional"])
@torch.no_grad()
def test_resize_token_embeddings_resizes_every_vocabulary_matrix(variant: str) -> None:
    model = rnn_variant(variant)
    model.resize_token_embeddings(VOCAB + 5)
    assert model.config.vocab_size == VOCAB + 5
    for matrix in (model.get_input_embeddings().weight, model.get_decoder().embed_tokens.weight,
                   model.get_output_embeddings().weight):
        assert matrix.size(0) == VOCAB + 5
    assert model.get_output_embeddings().bias.size(0) == VOCAB + 5
    input_ids, attention_mask = source_batch((5, 3, 7))
    labels = torch.full((3, 2), VOCAB + 4)
    assert model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits.shape == (3, 2, VOCAB + 5)
    if model.config.tie_word_embeddings:
        assert model.get_output_embeddings().weight is model.get_decoder().embed_tokens.weight


def test_encoder_rejects_left_padding() -> None:
    model = rnn_variant("bahdanau-gru")
    input_ids, attention_mask = source_batch((5, 3, 7))
    with pytest.raises(ValueError, match="right-padded"):
        model(input_ids=input_ids, attention_mask=attention_mask.flip(1), labels=target_batch(3, 4))


@pytest.mark.parametrize("variant", ["bahdanau-tied-unidirectional", "luong_concat-gru", "none-lstm"])
@torch.no_grad()
def test_save_load_is_exact(variant: str, tmp_path: Path) -> None:
    model = rnn_variant(variant)
    model.save_pretrained(tmp_path)
    saved = {p.name for p in tmp_path.iterdir()}
    assert {"configuration_rnn_seq2seq.py", "modeling_rnn_seq2seq.py", "attention.py", "seq2seq_utils.py",
            "validation.py"} <= saved
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForSeq2SeqLM"] == "modeling_rnn_seq2seq.RNNSeq2SeqForConditionalGeneration"
    assert auto_map["AutoModel"] == "modeling_rnn_seq2seq.RNNSeq2SeqModel"
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is RNNSeq2SeqForConditionalGeneration
    for (name, a), (_, b) in zip(model.state_dict().items(), reloaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    input_ids, attention_mask = source_batch((5, 3, 7))
    labels = target_batch(3, 4)
    # the weights are bitwise equal; the loaded (memory-mapped) tensors sit at other alignments, so the CPU kernels
    # may round the last bit differently
    torch.testing.assert_close(model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits,
                               reloaded(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits,
                               atol=1e-6, rtol=0)
    generate = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=2, max_new_tokens=6)
    assert torch.equal(model.generate(**generate), reloaded.generate(**generate))
    assert isinstance(AutoModel.from_pretrained(tmp_path), RNNSeq2SeqModel)
    if model.config.tie_word_embeddings:
        assert reloaded.lm_head.weight is reloaded.get_input_embeddings().weight


REMOTE_SCRIPT = """
import sys; sys.modules["encdec"] = None
import json, torch
from transformers import AutoModel, AutoModelForSeq2SeqLM
result = {}
for folder in sys.argv[1:]:
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert not type(model).__module__.startswith("encdec"), type(model).__module__
    bare = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(bare).__name__ == "RNNSeq2SeqModel", type(bare)
    inputs = torch.load(folder + "/inputs.pt", weights_only=True)
    with torch.no_grad():
        result[folder] = model.generate(**inputs, num_beams=2, max_new_tokens=6).tolist()
print("RESULT" + json.dumps(result))
"""


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_remote_code_loads_without_the_package(tmp_path: Path) -> None:
    input_ids, attention_mask = source_batch((5, 3, 7))
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
    expected = {}
    for variant in ("bahdanau-gru", "luong_general-lstm", "none-gru-1to2"):
        folder = tmp_path / variant
        model = trained_rnn_variant(variant)
        model.save_pretrained(folder)
        torch.save(inputs, folder / "inputs.pt")
        with torch.no_grad():
            expected[str(folder)] = model.generate(**inputs, num_beams=2, max_new_tokens=6).tolist()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", REMOTE_SCRIPT, *expected], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert result == expected
