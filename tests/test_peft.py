"""PEFT on both families, as docs/models.md ("Fine-tuning with PEFT") shows it: this file runs the page's LoRA and
prompt-tuning examples as written, with the model folder's path changed and a few checks between their statements.

The bases are tiny models of each family (the Bahdanau RNN, and a Luong ``general`` RNN with tied embeddings, whose
readout is narrowed by ``output_projection`` and whose embedding width differs from its state width) trained for a
moment on the toy task: adapters adapt a trained model, and at random initialisation the RNN's attention passes
gradients too small for three steps to show. Checked: LoRA trains exactly the documented modules, three steps
change the adapters and the loss, the saved adapter reloaded onto a fresh base gives the same logits and tokens,
``merge_and_unload`` gives the adapted logits, and LoRA's gradients are the same with gradient checkpointing;
prompt tuning trains only the prompt vectors and generates what its own forward pass predicts; the documented
targets leave out no linear layer unnamed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel

from encdec.folders import save_for_pipeline
from toy import (
    EOS,
    RNN_VARIANTS,
    TINY_MODELS,
    VARIANT_RNN,
    Batch,
    digit_tokenizer,
    tiny_model,
    toy_batch,
    toy_model,
    train_loop,
    train_on_toy_task,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "models.md"
FOLDER_IN_DOCS = "runs/demo-transformer"  # the model folder the examples load; replaced by the test's
BASES = {  # name: the model config of the base
    "transformer": TINY_MODELS["transformer"],
    "rnn": TINY_MODELS["rnn"],
    "rnn-luong-tied": {**TINY_MODELS["rnn"], "attention": "luong_general", "embedding_dim": 8,
                       "tie_word_embeddings": True},
}
LORA_LR = 2e-3  # three AdamW steps of the docs' adapters (r=8, alpha 16) on one batch, without overshooting
# the linear layers the LoRA targets leave out, and why (docs/models.md): the Transformer's output layer is tied to
# the embeddings; the RNN's v_a has one output, its bridge makes only the first state, its lm_head is the softmax
LEFT_OUT = {"transformer_seq2seq": {"lm_head"}, "rnn_seq2seq": {"v_a", "W_s", "W_cell", "lm_head"}}


def docs_example(heading: str) -> list[str]:
    """The lines of the first Python block after the docs' ``### heading``."""
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text[text.index(f"\n### {heading}\n"):], re.S)[1]
    return block.splitlines()


def split_at_training(lines: list[str]) -> tuple[str, str]:
    """The example before and after its ``# ... train `model` ...`` line (the test trains there)."""
    at = next(i for i, line in enumerate(lines) if line.startswith("# ... train `model`"))
    return "\n".join(lines[:at]), "\n".join(lines[at + 1:])


def run(code: str, folder: Path, namespace: dict[str, Any]) -> None:
    exec(code.replace(FOLDER_IN_DOCS, str(folder)), namespace)


def documented_lora_targets() -> dict[str, list[str]]:
    """``LORA_TARGETS`` as the docs' LoRA example writes it."""
    tree = ast.parse("\n".join(docs_example("LoRA: which modules")))
    value = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(target, ast.Name) and target.id == "LORA_TARGETS" for target in node.targets))
    return ast.literal_eval(value)


def the_batch() -> Batch:
    return toy_batch(16, torch.Generator().manual_seed(1))


@torch.no_grad()
def loss_and_logits(model: nn.Module, batch: Batch) -> tuple[float, torch.Tensor]:
    input_ids, attention_mask, labels = batch
    out = model.eval()(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    return out.loss.item(), out.logits


@torch.no_grad()
def generations(model: nn.Module, batch: Batch) -> dict[str, list[list[int]]]:
    input_ids, attention_mask, _ = batch
    return {name: model.eval().generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10,
                                        num_beams=beams, do_sample=False).tolist()
            for name, beams in (("greedy", 1), ("beam", 3))}


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


@pytest.fixture(scope="module")
def base_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each base trained for 120 steps on the toy task (long enough for each to end its outputs at varied steps) and
    saved with the digit tokenizer."""
    root = tmp_path_factory.mktemp("peft-bases")
    folders = {}
    for name, config in BASES.items():
        model = toy_model(config)
        train_on_toy_task(model, steps=120, batch_size=32, lr=1e-2)
        model.save_pretrained(root / name)
        digit_tokenizer().save_pretrained(root / name)
        folders[name] = root / name
    return folders


# --- LoRA -------------------------------------------------------------------------------------------------------------

@dataclass
class LoraRun:
    """What the docs' LoRA example made on one base, with the test's records between its statements."""

    namespace: dict[str, Any]
    folder: Path
    adapter_folder: Path
    before: dict[str, torch.Tensor]  # the parameters when get_peft_model returned
    losses: list[float] = field(default_factory=list)  # the eval loss on the batch before and after training
    adapted: dict[str, Any] = field(default_factory=dict)  # the reloaded adapter's logits and tokens, before merging


@pytest.fixture(scope="module", params=list(BASES))
def lora_run(request: pytest.FixtureRequest, base_folders: dict[str, Path]) -> LoraRun:
    folder = base_folders[request.param]
    setup, reload = split_at_training(docs_example("LoRA: which modules"))
    *load, merge = reload.splitlines()
    assert merge.startswith("merged = adapted.merge_and_unload()"), merge
    namespace: dict[str, Any] = {}
    torch.manual_seed(0)
    run(setup, folder, namespace)
    model, batch = namespace["model"], the_batch()
    record = LoraRun(namespace, folder, Path(f"{folder}-lora"), snapshot(model))
    record.losses.append(loss_and_logits(model, batch)[0])
    train_loop(model, [batch] * 3, lr=LORA_LR)
    record.losses.append(loss_and_logits(model, batch)[0])
    run("\n".join(load), folder, namespace)
    record.adapted = {"logits": loss_and_logits(namespace["adapted"], batch)[1],
                      "tokens": generations(namespace["adapted"], batch)}
    run(merge, folder, namespace)
    return record


def adapted_modules(model: nn.Module) -> set[str]:
    return {name.split(".lora_")[0] for name, param in model.named_parameters() if param.requires_grad}


def test_lora_trains_the_documented_modules_and_nothing_else(lora_run: LoraRun) -> None:
    model = lora_run.namespace["model"]
    targets = lora_run.namespace["LORA_TARGETS"][model.config.model_type]
    trainable = [name for name, param in model.named_parameters() if param.requires_grad]
    assert trainable and all(re.search(r"\.lora_[AB]\.default\.weight$", name) for name in trainable), trainable
    base = AutoModelForSeq2SeqLM.from_pretrained(lora_run.folder)
    expected = {name for name, module in base.named_modules()
                if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in targets}
    assert {name.removeprefix("base_model.model.") for name in adapted_modules(model)} == expected


def test_three_steps_change_the_adapters_and_the_loss_and_no_base_weight(lora_run: LoraRun) -> None:
    model, before = lora_run.namespace["model"], lora_run.before
    for name, param in model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == param.requires_grad, name  # both A and B of every adapter moved; nothing else did
    assert lora_run.losses[1] < lora_run.losses[0], lora_run.losses


def test_the_saved_adapter_reloads_onto_a_fresh_base(lora_run: LoraRun) -> None:
    assert sorted(path.name for path in lora_run.adapter_folder.iterdir()) == ["README.md", "adapter_config.json",
                                                                              "adapter_model.safetensors"]
    batch = the_batch()
    _, logits = loss_and_logits(lora_run.namespace["model"], batch)
    torch.testing.assert_close(lora_run.adapted["logits"], logits, rtol=0, atol=1e-5)
    _, base_logits = loss_and_logits(AutoModelForSeq2SeqLM.from_pretrained(lora_run.folder), batch)
    assert not torch.allclose(lora_run.adapted["logits"], base_logits, atol=1e-4)  # the adapter is in effect
    assert lora_run.adapted["tokens"] == generations(lora_run.namespace["model"], batch)


def test_merge_and_unload_gives_a_plain_model_with_the_adapted_logits(lora_run: LoraRun, tmp_path: Path) -> None:
    merged = lora_run.namespace["merged"]
    assert isinstance(merged, PreTrainedModel) and not isinstance(merged, PeftModel)
    assert not any("lora_" in name for name, _ in merged.named_parameters())
    batch = the_batch()
    _, logits = loss_and_logits(merged, batch)
    torch.testing.assert_close(logits, lora_run.adapted["logits"], rtol=0, atol=1e-5)
    assert generations(merged, batch) == lora_run.adapted["tokens"]
    save_for_pipeline(merged, digit_tokenizer(), tmp_path / "merged")  # a complete folder, as the docs say
    _, reloaded = loss_and_logits(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "merged"), batch)
    torch.testing.assert_close(reloaded, logits, rtol=0, atol=1e-5)  # equal weights; the kernels may round apart


@pytest.mark.parametrize("name", ["transformer", "rnn"])
def test_lora_gradients_are_the_same_with_gradient_checkpointing(name: str, base_folders: dict[str, Path]) -> None:
    grads = []
    for checkpointing in (False, True):
        base = AutoModelForSeq2SeqLM.from_pretrained(base_folders[name])
        if checkpointing:  # what Seq2SeqTrainingArguments(gradient_checkpointing=True) does; 5.24 renamed the call
            enable = getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable
            enable()
        torch.manual_seed(0)
        targets = documented_lora_targets()[base.config.model_type]
        model = get_peft_model(base, LoraConfig(task_type="SEQ_2_SEQ_LM", r=4, target_modules=targets))
        train_loop(model, [the_batch()], lr=1e-2)  # B is no longer zero, so A gets a gradient below too
        input_ids, attention_mask, labels = the_batch()
        model.train()(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        grads.append({name: param.grad for name, param in model.named_parameters() if param.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for key, grad in grads[0].items():
        torch.testing.assert_close(grads[1][key], grad, rtol=1e-5, atol=1e-7, msg=key)


# --- the documented targets -------------------------------------------------------------------------------------------

CONFIGS = {"transformer": TINY_MODELS["transformer"],
           **{f"rnn-{variant}": {**VARIANT_RNN, **values} for variant, values in RNN_VARIANTS.items()}}


def linear_names(model: nn.Module) -> set[str]:
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, nn.Linear)}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_linear_layer_is_a_target_or_left_out_on_purpose(name: str) -> None:
    model = tiny_model(CONFIGS[name])
    model_type = model.config.model_type
    targets = set(documented_lora_targets()[model_type])
    assert linear_names(model) <= targets | LEFT_OUT[model_type], linear_names(model) - targets - LEFT_OUT[model_type]
    if getattr(model.config, "attention", None) != "none":  # the docs: an RNN without attention has no target
        assert linear_names(model) & targets


def test_every_documented_target_exists() -> None:
    found = {model_type: set() for model_type in LEFT_OUT}
    for config in CONFIGS.values():
        model = tiny_model(config)
        found[model.config.model_type] |= linear_names(model)
    for model_type, targets in documented_lora_targets().items():
        assert set(targets) <= found[model_type], set(targets) - found[model_type]


def test_the_usual_q_v_recipe_misses_the_self_attention_and_all_linear_is_the_six() -> None:
    """What the docs say of the usual recipe and of ``"all-linear"`` on the Transformer."""
    usual = get_peft_model(tiny_model("transformer"), LoraConfig(task_type="SEQ_2_SEQ_LM",
                                                                 target_modules=["q_proj", "v_proj"]))
    assert {name.rsplit(".", 1)[-1] for name in adapted_modules(usual)} == {"q_proj"}
    assert all(".cross_attn." in name for name in adapted_modules(usual))
    for family, extra in (("transformer", set()), ("rnn", {"v_a", "W_s", "W_cell"})):
        model = get_peft_model(tiny_model(family), LoraConfig(task_type="SEQ_2_SEQ_LM", target_modules="all-linear"))
        present = linear_names(tiny_model(family)) & set(documented_lora_targets()[model.config.model_type])
        assert {name.rsplit(".", 1)[-1] for name in adapted_modules(model)} == present | extra


# --- prompt tuning ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(BASES))
def test_prompt_tuning_trains_only_the_prompt_and_generates_what_it_predicts(name: str,
                                                                            base_folders: dict[str, Path]) -> None:
    setup, rest = split_at_training(docs_example("Prompt tuning"))
    namespace: dict[str, Any] = {}
    torch.manual_seed(0)
    run(setup, base_folders[name], namespace)
    model, batch = namespace["model"], the_batch()
    assert [name for name, param in model.named_parameters() if param.requires_grad] == [
        "prompt_encoder.default.embedding.weight"]
    input_ids, attention_mask, labels = batch
    model.train()(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    received = {name for name, param in model.named_parameters() if param.grad is not None}
    assert received == {"prompt_encoder.default.embedding.weight"}
    model.zero_grad()
    before, (loss_before, _) = snapshot(model), loss_and_logits(model, batch)
    train_loop(model, [batch] * 3, lr=1e-1)
    loss_after, _ = loss_and_logits(model, batch)
    assert loss_after < loss_before
    assert [key for key, value in snapshot(model).items() if not torch.equal(value, before[key])] == [
        "prompt_encoder.default.embedding.weight"]
    run(rest, base_folders[name], namespace)  # the docs' generate call, on the folder's tokenizer

    # generate() reads the prompt as the forward pass does: each token is the argmax given the tokens before it
    generated = torch.tensor(generations(model, batch)["greedy"])
    with torch.no_grad():
        logits = model.eval()(input_ids=input_ids, attention_mask=attention_mask,
                              decoder_input_ids=generated[:, :-1]).logits
    ended = torch.cumsum(generated[:, :-1] == EOS, dim=1) > 0  # steps after EOS: padding
    assert torch.equal(logits.argmax(-1)[~ended], generated[:, 1:][~ended])
    _, base_logits = loss_and_logits(AutoModelForSeq2SeqLM.from_pretrained(base_folders[name]), batch)
    assert not torch.allclose(loss_and_logits(model, batch)[1], base_logits, atol=1e-4)  # the prompt is read
