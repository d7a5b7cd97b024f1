"""A Marian model converted by name (encdec.marian.convert) is the same network: transformers' own ``MarianMTModel``
with random weights (every LayerNorm, bias and the logits bias non-trivial) and encdec's Transformer give the same
floats, the same greedy tokens and the same beam-search tokens; what encdec cannot represent is refused by name."""

from __future__ import annotations

import pytest
import torch
from transformers import MarianConfig, MarianMTModel

from encdec.errors import EncdecError
from encdec.marian.convert import check_marian_config, marian_config_to_encdec, marian_state_dict_to_encdec
from encdec.models import TransformerSeq2SeqForConditionalGeneration

PAD = 39
MARIAN = dict(vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
              decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=24, max_position_embeddings=64,
              pad_token_id=PAD, eos_token_id=0, decoder_start_token_id=PAD, activation_function="swish",
              scale_embedding=True, dropout=0.0)


def random_marian(seed: int = 0, attn_implementation: str = "eager", **values) -> MarianMTModel:
    """A MarianMTModel whose every trained tensor (not the fixed position table) is random, the logits bias too."""
    torch.manual_seed(seed)
    model = MarianMTModel._from_config(MarianConfig(**{**MARIAN, **values}),
                                       attn_implementation=attn_implementation).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.normal_(0.0, 0.3)
        model.final_logits_bias.normal_(0.0, 0.5)
    return model


def converted(marian: MarianMTModel, attn_implementation: str = "eager") -> TransformerSeq2SeqForConditionalGeneration:
    config = marian_config_to_encdec(marian.config.to_dict())
    model = TransformerSeq2SeqForConditionalGeneration._from_config(config,
                                                                    attn_implementation=attn_implementation).eval()
    model.load_state_dict(marian_state_dict_to_encdec(marian.state_dict(), config), strict=True)
    model.generation_config.forced_eos_token_id = marian.generation_config.forced_eos_token_id
    return model


SOURCES = torch.tensor([[5, 6, 7, 8, 9, 10, 0], [11, 12, 13, 0, PAD, PAD, PAD], [14, 15, 16, 17, 0, PAD, PAD]])
TARGETS = torch.tensor([[PAD, 3, 4, 5, 6], [PAD, 7, 8, 9, 10], [PAD, 1, 2, 3, 4]])


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_converted_marian_gives_the_same_logits_bit_for_bit(attention: str) -> None:
    marian = random_marian(attn_implementation=attention)
    ours = converted(marian, attention)
    mask = (SOURCES != PAD).long()
    with torch.no_grad():
        theirs = marian(input_ids=SOURCES, attention_mask=mask, decoder_input_ids=TARGETS).logits
        mine = ours(input_ids=SOURCES, attention_mask=mask, decoder_input_ids=TARGETS).logits
    assert theirs.abs().max() > 1.0  # a real signal, and the logits bias is in it
    assert torch.equal(mine, theirs)


@pytest.mark.parametrize("search", [dict(num_beams=1), dict(num_beams=5, num_return_sequences=2)])
def test_converted_marian_generates_the_same_tokens(search: dict) -> None:
    marian = random_marian(seed=1)
    ours = converted(marian)
    mask = (SOURCES != PAD).long()
    settings = dict(max_new_tokens=12, do_sample=False, bad_words_ids=[[PAD]], **search)
    expected = marian.generate(input_ids=SOURCES, attention_mask=mask, **settings)
    assert torch.equal(ours.generate(input_ids=SOURCES, attention_mask=mask, **settings), expected)
    assert expected.size(1) > 5  # more than a start and an end: every step's choice was compared


def test_an_untied_output_layer_is_copied_and_saved_as_its_own(tmp_path) -> None:
    marian = random_marian(seed=2, tie_word_embeddings=False)
    assert not torch.equal(marian.lm_head.weight, marian.model.shared.weight)
    ours = converted(marian)
    ours.save_pretrained(tmp_path)
    reloaded = TransformerSeq2SeqForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert torch.equal(reloaded.lm_head.weight, marian.lm_head.weight)
    assert torch.equal(reloaded.final_logits_bias, marian.final_logits_bias)
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=SOURCES, decoder_input_ids=TARGETS).logits,
                           marian(input_ids=SOURCES, decoder_input_ids=TARGETS).logits)


@pytest.mark.parametrize(("change", "named"), [
    ({"model_type": "bart"}, "not a Marian one"),
    ({"architectures": ["MarianForCausalLM"]}, "MarianForCausalLM"),
    ({"decoder_vocab_size": 50}, "decoder_vocab_size"),
    ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings"),
    ({"normalize_before": True}, "normalize_before"),
    ({"normalize_embedding": True}, "normalize_embedding"),
    ({"activation_function": "tanh"}, "activation_function"),
])
def test_a_config_encdec_cannot_represent_is_refused_by_its_option(change: dict, named: str) -> None:
    config = {**MarianConfig(**MARIAN).to_dict(), **change}
    with pytest.raises(EncdecError, match=named) as error:
        check_marian_config(config, name="model/config.json")
    assert "\n" not in str(error.value) and "model/config.json" in str(error.value)


def test_a_missing_or_misshapen_tensor_is_named() -> None:
    marian = random_marian()
    config = marian_config_to_encdec(marian.config.to_dict())
    state = marian.state_dict()
    lacking = {key: value for key, value in state.items() if key != "model.decoder.layers.1.fc1.bias"}
    with pytest.raises(EncdecError, match=r"model.safetensors lack model\.decoder\.layers\.1\.fc1\.bias"):
        marian_state_dict_to_encdec(lacking, config, name="model.safetensors")
    bent = {**state, "model.encoder.layers.0.self_attn.k_proj.weight": torch.zeros(16, 8)}
    with pytest.raises(EncdecError, match=r"k_proj\.weight has shape \(16, 8\), but config\.json's sizes make it "
                                          r"\(16, 16\)"):
        marian_state_dict_to_encdec(bent, config)
