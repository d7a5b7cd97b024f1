"""Saving, loading and the Hub folder: exact round-trips, weight tying on disk, auto_map, code files, and
``trust_remote_code`` loading in a process that cannot import encdec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, GenerationConfig

import encdec
from encdec import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration, TransformerSeq2SeqModel
from remote_code import BLOCK_ENCDEC
from toy import MARIAN_IDS, MARIAN_SWITCHES, random_logits_bias

MODELS_DIR = Path(encdec.__file__).parent / "models"
# What save_pretrained copies beside the weights, written out: the modeling file and, through single-dot sibling
# imports, everything it imports from the package (the pipeline file comes only with save_for_pipeline).
CODE_FILES = ["attention.py", "compat.py", "configuration_seq2seq.py", "configuration_transformer_seq2seq.py",
              "modeling_transformer_seq2seq.py", "seq2seq_utils.py", "validation.py"]
EMBEDDING_KEYS = ("lm_head.weight", "model.encoder.embeddings.embed_tokens.weight",
                  "model.decoder.embeddings.embed_tokens.weight")


def _inputs() -> dict[str, torch.Tensor]:
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    return dict(input_ids=torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]]), attention_mask=attention_mask,
                decoder_input_ids=torch.tensor([[1, 4, 5, 6], [1, 7, 8, 9]]))


def _perturb(model: torch.nn.Module) -> None:
    """Move every parameter away from its init, so that a load that silently re-initialises cannot pass."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("position_embedding_type", ["sinusoidal", "learned"])
def test_save_load_round_trip_is_exact(tmp_path, make_transformer, tie: bool, position_embedding_type: str) -> None:
    model = make_transformer(tie_word_embeddings=tie, position_embedding_type=position_embedding_type,
                             normalize_before=True)
    _perturb(model)
    model.save_pretrained(tmp_path)
    loaded = TransformerSeq2SeqForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(**_inputs()).logits, model(**_inputs()).logits)
    assert loaded.config.tie_word_embeddings is tie

    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        stored = set(f.keys())
    present = [key for key in EMBEDDING_KEYS if key in stored]
    pointers = {loaded.get_input_embeddings().weight.data_ptr(), loaded.get_output_embeddings().weight.data_ptr(),
                loaded.get_decoder().embeddings.embed_tokens.weight.data_ptr()}
    if tie:
        assert len(present) == 1  # one tensor on disk for the three tied aliases
        assert len(pointers) == 1  # and one storage after loading
    else:
        assert present == list(EMBEDDING_KEYS)
        assert len(pointers) == 3
    assert not any("embed_positions.table" in key for key in stored)  # the sinusoid table is recomputed


@pytest.mark.parametrize("bias", [True, False], ids=["logits_bias", "none"])
def test_the_logits_bias_is_saved_and_loaded_exactly(tmp_path, make_transformer, bias: bool) -> None:
    """Marian's output bias (``final_logits_bias``, on for an imported model): saved with the weights and loaded bit
    for bit, swish and the rest of Marian's switches with it; with the switch off, nothing of it is saved."""
    model = make_transformer(**{**MARIAN_SWITCHES, **MARIAN_IDS, "final_logits_bias": bias})
    _perturb(model)
    if bias:
        random_logits_bias(model)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(**_inputs()).logits, model(**_inputs()).logits)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        stored = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (a safetensors file, not a dict)
    assert ("final_logits_bias" in stored) is bias
    if bias:
        assert torch.equal(stored["final_logits_bias"], model.final_logits_bias)
    assert ("final_logits_bias" in loaded.state_dict()) is bias
    if bias:
        assert torch.equal(loaded.final_logits_bias, model.final_logits_bias) and loaded.final_logits_bias.any()
    assert (loaded.config.activation_function, loaded.config.bos_token_id) == ("swish", None)


def test_tied_model_stays_tied_when_trained_after_loading(tmp_path, make_transformer) -> None:
    make_transformer(tie_word_embeddings=True).save_pretrained(tmp_path)
    loaded = TransformerSeq2SeqForConditionalGeneration.from_pretrained(tmp_path)
    with torch.no_grad():
        loaded.get_output_embeddings().weight[5].fill_(3.0)
    assert (loaded.get_input_embeddings().weight[5] == 3.0).all()
    assert (loaded.get_decoder().embeddings.embed_tokens.weight[5] == 3.0).all()


def test_generation_config_json_has_the_special_tokens(tmp_path, make_transformer) -> None:
    make_transformer(decoder_start_token_id=3, eos_token_id=2, pad_token_id=0).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "generation_config.json").read_text())
    assert (data["decoder_start_token_id"], data["eos_token_id"], data["pad_token_id"]) == (3, 2, 0)
    loaded = GenerationConfig.from_pretrained(tmp_path)
    assert loaded.decoder_start_token_id == 3


def test_generation_config_json_has_a_max_length(tmp_path, make_transformer) -> None:
    """The saved length limit is what ``max_position_embeddings`` positions hold: the start token and 63 new tokens
    for 64 positions, as ``max_new_tokens`` (a caller's own then replaces it without a warning), not transformers'
    default of 20."""
    make_transformer(max_position_embeddings=64).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "generation_config.json").read_text())
    assert data["max_new_tokens"] == 63
    assert "max_length" not in data


def test_config_json_has_auto_map_and_the_code_files_are_copied(tmp_path, make_transformer) -> None:
    make_transformer().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "transformer_seq2seq"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_transformer_seq2seq.TransformerSeq2SeqConfig",
        "AutoModel": "modeling_transformer_seq2seq.TransformerSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "modeling_transformer_seq2seq.TransformerSeq2SeqForConditionalGeneration",
    }
    assert sorted(path.name for path in tmp_path.glob("*.py")) == CODE_FILES
    for name in CODE_FILES:
        copied = tmp_path / name
        assert copied.read_text() == (MODELS_DIR / name).read_text()
        assert "encdec" not in "".join(line for line in copied.read_text().splitlines() if "import" in line)


def test_base_model_save_also_writes_auto_map(tmp_path, tiny_transformer_config) -> None:
    TransformerSeq2SeqModel(tiny_transformer_config()).save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == "modeling_transformer_seq2seq.TransformerSeq2SeqModel"
    assert auto_map["AutoConfig"] == "configuration_transformer_seq2seq.TransformerSeq2SeqConfig"
    assert sorted(path.name for path in tmp_path.glob("*.py")) == CODE_FILES


REMOTE_SCRIPT = BLOCK_ENCDEC + textwrap.dedent(  # the package is installed here: the prelude hides it
    """
    import json

    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    folder, inputs_path, result_path = sys.argv[1:4]
    inputs = json.loads(open(inputs_path).read())
    input_ids, attention_mask = torch.tensor(inputs["input_ids"]), torch.tensor(inputs["attention_mask"])
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    lm = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    tokens = lm.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8, num_beams=2, do_sample=False)
    with torch.no_grad():
        hidden = base(input_ids, attention_mask=attention_mask, decoder_input_ids=tokens).last_hidden_state
    json.dump({
        "encdec_loaded": any(name.split(".")[0] in HIDDEN for name, module in sys.modules.items()
                             if module is not None),
        "classes": [type(config).__name__, type(lm).__name__, type(base).__name__],
        "modules": [type(config).__module__, type(lm).__module__, type(base).__module__],
        "tokens": tokens.tolist(),
        "hidden": hidden.tolist(),
    }, open(result_path, "w"))
    """
)


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_remote_code_loads_without_encdec(tmp_path, trained_tiny_transformer, reverse_batch) -> None:
    model = trained_tiny_transformer
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    input_ids, attention_mask, _ = reverse_batch(4, torch.Generator().manual_seed(5))
    tokens = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8, num_beams=2, do_sample=False)
    base = TransformerSeq2SeqModel.from_pretrained(folder).eval()
    with torch.no_grad():
        hidden = base(input_ids, attention_mask=attention_mask, decoder_input_ids=tokens).last_hidden_state
    inputs_path, result_path = tmp_path / "inputs.json", tmp_path / "result.json"
    inputs_path.write_text(json.dumps({"input_ids": input_ids.tolist(), "attention_mask": attention_mask.tolist()}))

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", REMOTE_SCRIPT, str(folder), str(inputs_path), str(result_path)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(result_path.read_text())
    assert result["encdec_loaded"] is False
    assert result["classes"] == ["TransformerSeq2SeqConfig", "TransformerSeq2SeqForConditionalGeneration",
                                 "TransformerSeq2SeqModel"]
    assert all(module.startswith("transformers_modules.") for module in result["modules"]), result["modules"]
    assert result["tokens"] == tokens.tolist()
    torch.testing.assert_close(torch.tensor(result["hidden"]), hidden, atol=1e-5, rtol=0)


def test_auto_classes_build_our_models() -> None:
    config = AutoConfig.for_model("transformer_seq2seq", vocab_size=20, d_model=16, encoder_layers=1,
                                  decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                  encoder_ffn_dim=16, decoder_ffn_dim=16)
    assert type(config) is TransformerSeq2SeqConfig
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is TransformerSeq2SeqForConditionalGeneration
    assert type(AutoModel.from_config(config)) is TransformerSeq2SeqModel


def test_auto_classes_load_a_saved_folder(tmp_path, make_transformer) -> None:
    model = make_transformer()
    _perturb(model)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is TransformerSeq2SeqForConditionalGeneration
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert type(base) is TransformerSeq2SeqModel
    inputs = _inputs()
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)
        assert torch.equal(base(**inputs).last_hidden_state, model.model(**inputs).last_hidden_state)
