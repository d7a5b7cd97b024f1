"""What a caller of transformers' own seq2seq models (Marian, BART) can count on, held to for encdec's models
(issue 40): the old cache name warns where transformers renamed it (5.24) and nowhere else, and never from
``generate``; a cache the caller passes is used with labels too, so PEFT's prefix tuning trains and generates;
``set_attn_implementation`` switches a loaded Transformer, and ``output_attentions`` gives weights under every
backend; a caller's ``max_length`` (``generate``, ``Seq2SeqTrainer``'s ``generation_max_length``) beats the saved
``max_new_tokens``. Run on the newest release and on the floor (.ci/run)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, PeftModel, PrefixTuningConfig, PromptTuningConfig, get_peft_model
from transformers import AutoModelForSeq2SeqLM, GenerationConfig, Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.generation import utils as generation_utils
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import is_torch_flex_attn_available

from encdec import EnsembleForSeq2SeqLM
from encdec.models.compat import CACHE_NAME, cache_field, cache_of
from toy import (
    BOS,
    EOS,
    PAD,
    TEST_TRANSFORMER,
    collate,
    rnn_variant,
    source_batch,
    target_batch,
    tiny_model,
    toy_examples,
)
from toy import RANDOM_VOCAB_SIZE as VOCAB

DEPRECATED = r"`past_key_values` is deprecated and will be removed in version 5\.40\.0 for `{}\.forward`\. Use `cache`"
FIXTURES = Path(__file__).parent / "fixtures" / "before_cache_rename"
# transformers' own eager-vs-SDPA tolerances for float32 on the CPU (tests/test_modeling_common.py)
ATOL, RTOL = 1e-6, 1e-4


def build(name: str, seed: int = 0):
    return tiny_model(TEST_TRANSFORMER, seed=seed, vocab_size=VOCAB) if name == "transformer" else rnn_variant(name)


def decoder_ids(batch_size: int = 3, length: int = 4) -> torch.Tensor:
    return torch.cat([torch.full((batch_size, 1), BOS), target_batch(batch_size, length - 1)], dim=1)


def deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "past_key_values" in str(w.message)]


# --- point 3: the old cache name ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm"])
@torch.no_grad()
def test_the_old_cache_name_warns_where_it_was_renamed_and_only_there(name: str) -> None:
    """5.24 renamed `past_key_values` to `cache`: the old name still works but warns there, with transformers'
    message naming the class; on older releases it is the only name and nothing warns."""
    model = build(name)
    input_ids, attention_mask = source_batch()
    target = decoder_ids()
    prefix = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target[:, :2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rest = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target[:, 2:],
                     past_key_values=cache_of(prefix))
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target, use_cache=False)
    torch.testing.assert_close(torch.cat([prefix.logits, rest.logits], dim=1), full.logits, atol=1e-5, rtol=0)
    found = deprecations(caught)
    if CACHE_NAME == "cache":
        assert len(found) == 1, found
        assert [w.category for w in caught if "past_key_values" in str(w.message)] == [FutureWarning]
        assert re.match(DEPRECATED.format(type(model).__name__), found[0]), found[0]
    else:
        assert not found, found


@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm"])
@torch.no_grad()
def test_generate_never_warns_about_the_cache_name(name: str) -> None:
    """Greedy, beam search, sampling and continued generation pass the cache under the running release's name."""
    model = build(name)
    input_ids, attention_mask = source_batch()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = model.generate(**kwargs, return_dict_in_generate=True)
        model.generate(**kwargs, num_beams=2)
        model.generate(**kwargs, do_sample=True)
        model.generate(**kwargs, decoder_input_ids=first.sequences, **cache_field(cache_of(first)))
    assert not deprecations(caught)


# --- point 4: a cache the caller passes, with labels too (PEFT's prefix tuning) --------------------------------------

def peft_batch() -> dict[str, torch.Tensor]:
    input_ids, attention_mask = source_batch()
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": target_batch(3, 4)}


def train_steps(model, batch: dict[str, torch.Tensor], steps: int = 3, lr: float = 0.05) -> list[float]:
    """``steps`` AdamW steps on the trainable parameters (the adapter's); the losses; leaves the model in eval mode."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    return losses


def trainable(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


@torch.no_grad()
def assert_generation_reads_the_prefix(model, base, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every step's logits in ``generate`` equal one forward over the generated ids with the prefix (so each step saw
    the prefix once, at the right positions), and differ from the base model's. Returns the sequences."""
    source = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    out = model.generate(**source, max_new_tokens=4, min_new_tokens=4, return_dict_in_generate=True,
                         output_logits=True)
    steps = torch.stack(out.logits, dim=1)  # (B, 4, V)
    decoder_input_ids = out.sequences[:, :-1]
    torch.testing.assert_close(steps, model(**source, decoder_input_ids=decoder_input_ids).logits, atol=1e-5, rtol=0)
    assert not torch.allclose(steps, base(**source, decoder_input_ids=decoder_input_ids).logits, atol=1e-3)
    return out.sequences


# PEFT 0.21 passes its prefix under the old name, which warns on 5.24 as it does for transformers' own models
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_prefix_tuning_trains_saves_reloads_and_generates(tmp_path: Path) -> None:
    """With labels the model makes no cache but reads the prefix PEFT passes as one: the loss is not the base
    model's, three steps change the prefix and lower the loss, the base weights stay; generate reads the prefix at
    every step (on 5.24 beside generate's own cache), and a reloaded adapter generates the same."""
    batch = peft_batch()
    base = build("transformer")
    base_loss = base(**batch).loss.item()
    frozen = {name: p.detach().clone() for name, p in base.named_parameters()}
    model = get_peft_model(base, PrefixTuningConfig(task_type="SEQ_2_SEQ_LM", num_virtual_tokens=4))
    before = trainable(model)
    losses = train_steps(model, batch)
    assert losses[0] != pytest.approx(base_loss, abs=1e-4), "the prefix was ignored"
    assert losses[-1] < losses[0], losses
    assert before and all(not torch.equal(value, before[name]) for name, value in trainable(model).items())
    assert all(torch.equal(p, frozen[name]) for name, p in base.named_parameters())
    sequences = assert_generation_reads_the_prefix(model, build("transformer"), batch)
    model.save_pretrained(tmp_path)
    reloaded = PeftModel.from_pretrained(build("transformer"), tmp_path).eval()
    again = reloaded.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=4,
                              min_new_tokens=4)
    assert torch.equal(again, sequences)


@pytest.mark.parametrize("method", ["lora", "prompt_tuning"])
def test_lora_and_prompt_tuning_still_train_and_generate(method: str) -> None:
    """The cache rule above changes nothing for the adapters that pass no cache: both train, and a merged LoRA model
    gives the adapted model's logits."""
    batch = peft_batch()
    config = LoraConfig(task_type="SEQ_2_SEQ_LM", r=4, target_modules=["qkv_proj", "q_proj", "kv_proj", "out_proj"]) \
        if method == "lora" else PromptTuningConfig(task_type="SEQ_2_SEQ_LM", num_virtual_tokens=4)
    model = get_peft_model(build("transformer"), config)
    losses = train_steps(model, batch)
    assert losses[-1] < losses[0], losses
    with torch.no_grad():
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   max_new_tokens=3, min_new_tokens=3)
        assert generated.shape == (3, 4)
        if method == "lora":
            adapted = model(**batch).logits
            torch.testing.assert_close(model.merge_and_unload()(**batch).logits, adapted, atol=1e-5, rtol=1e-4)


# --- point 5: switching the attention backend of a loaded model ------------------------------------------------------

BACKENDS = ["sdpa", "flex_attention", "eager"] if is_torch_flex_attn_available() else ["sdpa", "eager"]


def count_calls(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> dict[str, int]:
    """Wrap transformers' attention functions ``names`` so that each call is counted (undone after the test)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        def counted(*args, _name: str = name, _function=ALL_ATTENTION_FUNCTIONS[name], **kwargs):
            calls[_name] += 1
            return _function(*args, **kwargs)
        monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, name, counted)
    return calls


def all_attentions(output) -> tuple:
    return output.encoder_attentions + output.decoder_attentions + output.cross_attentions


@torch.no_grad()  # flex attention has no backward on the CPU
def test_set_attn_implementation_switches_a_loaded_transformer(monkeypatch: pytest.MonkeyPatch) -> None:
    """eager -> sdpa -> flex_attention -> eager: each call runs the chosen backend, with eager's logits (transformers'
    float32 tolerance); `output_attentions` runs the eager math for that call under every backend, so the weights
    are there, and equal eager's, instead of None."""
    model = tiny_model(TEST_TRANSFORMER, vocab_size=VOCAB, attn_implementation="eager")
    input_ids, attention_mask = source_batch()
    decoder_input_ids = decoder_ids(3, 5)
    decoder_attention_mask = torch.ones_like(decoder_input_ids)
    decoder_attention_mask[1, 3:] = 0  # padding in the target too
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                 decoder_attention_mask=decoder_attention_mask)
    reference = model(**batch, output_attentions=True)
    calls = count_calls(monkeypatch, [name for name in BACKENDS if name != "eager"])
    for backend in BACKENDS:
        model.set_attn_implementation(backend)
        assert model.config._attn_implementation == backend == model.model.config._attn_implementation
        before = dict(calls)
        torch.testing.assert_close(model(**batch).logits, reference.logits, atol=ATOL, rtol=RTOL)
        assert {name for name in calls if calls[name] > before[name]} == {backend} - {"eager"}, (backend, calls)
        before = dict(calls)
        weighed = model(**batch, output_attentions=True)
        assert calls == before, "output_attentions must run the eager math"
        assert all(weights is not None for weights in all_attentions(weighed))
        for got, want in zip(all_attentions(weighed), all_attentions(reference), strict=True):
            torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(weighed.logits, reference.logits, atol=ATOL, rtol=RTOL)


# --- point 6: the caller's length limit over the saved budget --------------------------------------------------------

NEVER_ENDS = [PAD, EOS]  # suppressed: random weights would end anywhere, and the length must be the limit's


def length_model(name: str):
    if name == "ensemble":
        return EnsembleForSeq2SeqLM([build("transformer"), build("transformer", seed=1)]).eval()
    return build(name)


@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm", "ensemble"])
@torch.no_grad()
def test_a_callers_max_length_beats_the_saved_max_new_tokens(name: str) -> None:
    """`max_length` as a keyword or in a passed generation config stops there (the start token included); a caller's
    `max_new_tokens` wins over its own `max_length` (transformers' rule); without a limit the saved budget holds,
    and the saved generation config is left as it was."""
    model = length_model(name)
    saved = model.generation_config.max_new_tokens
    assert saved is not None and saved > 10
    input_ids, attention_mask = source_batch()
    source = dict(input_ids=input_ids, attention_mask=attention_mask)
    assert model.generate(**source, suppress_tokens=NEVER_ENDS, max_length=6).shape[1] == 6
    assert model.generate(**source, suppress_tokens=NEVER_ENDS, max_new_tokens=3).shape[1] == 4
    assert model.generate(**source, suppress_tokens=NEVER_ENDS, max_length=6, max_new_tokens=3).shape[1] == 4
    passed = GenerationConfig(max_length=5, suppress_tokens=NEVER_ENDS)
    assert model.generate(**source, generation_config=passed).shape[1] == 5
    copied = GenerationConfig.from_dict({**model.generation_config.to_dict(), "suppress_tokens": NEVER_ENDS})
    assert model.generate(**source, generation_config=copied, max_length=7).shape[1] == 7  # as a pipeline passes
    assert model.generate(**source, suppress_tokens=NEVER_ENDS).shape[1] == saved + 1
    assert model.generation_config.max_new_tokens == saved and model.generation_config.max_length is None


@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm", "ensemble"])
@torch.no_grad()
def test_a_callers_max_new_tokens_beats_a_saved_max_length(name: str, monkeypatch) -> None:
    """A saved ``max_length`` (Marian's generation configs keep 512) gives way to a caller's ``max_new_tokens``,
    directly and through the pipeline's copied config, without transformers' "both have been set" warning; the
    saved ``max_length`` still holds for a call that gives no limit."""
    warned = []
    monkeypatch.setattr(generation_utils.logger, "warning", lambda message, *args: warned.append(message))
    model = length_model(name)
    model.generation_config.max_new_tokens, model.generation_config.max_length = None, 9
    source = dict(zip(("input_ids", "attention_mask"), source_batch(), strict=True))
    assert model.generate(**source, suppress_tokens=NEVER_ENDS, max_new_tokens=3).shape[1] == 4
    copied = GenerationConfig.from_dict({**model.generation_config.to_dict(), "suppress_tokens": NEVER_ENDS})
    assert model.generate(**source, generation_config=copied, max_new_tokens=5).shape[1] == 6
    assert [message for message in warned if "seem to have been set" in message] == []
    assert model.generate(**source, suppress_tokens=NEVER_ENDS).shape[1] == 9
    assert model.generation_config.max_length == 9 and model.generation_config.max_new_tokens is None


@pytest.mark.parametrize("name", ["transformer-post-ln", "rnn-bahdanau-lstm"])
@torch.no_grad()
def test_folders_saved_before_keep_their_budget_and_take_a_callers_max_length(name: str) -> None:
    """A folder saved with `max_new_tokens` in its generation_config.json (before this fix) needs no re-saving."""
    model = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / name).eval()
    saved = model.generation_config.max_new_tokens
    never_ends = [model.config.pad_token_id, model.config.eos_token_id]
    input_ids = torch.tensor([[5, 6, 7, 8, model.config.eos_token_id]])
    assert model.generate(input_ids=input_ids, suppress_tokens=never_ends, max_length=4).shape == (1, 4)
    assert model.generate(input_ids=input_ids, suppress_tokens=never_ends).shape == (1, saved + 1)


@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm"])
def test_seq2seq_trainer_generates_within_generation_max_length(name: str, tmp_path: Path) -> None:
    """`Seq2SeqTrainer`'s evaluation with `predict_with_generate` passes `generation_max_length` as `max_length`:
    every prediction stops there, not at the saved `max_new_tokens`."""
    model = build(name)
    model.generation_config.suppress_tokens = NEVER_ENDS

    def lengths(prediction) -> dict[str, float]:
        tokens = (prediction.predictions > PAD).sum(axis=1)  # padded with PAD to Seq2SeqTrainer's length
        return {"longest": float(tokens.max()), "shortest": float(tokens.min())}

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=4, predict_with_generate=True,
                                    generation_max_length=5, report_to=[], use_cpu=True, save_strategy="no",
                                    logging_strategy="no")
    trainer = Seq2SeqTrainer(model=model, args=args, eval_dataset=Dataset.from_list(toy_examples(4)),
                             data_collator=collate, compute_metrics=lengths)
    metrics = trainer.evaluate()
    assert metrics["eval_longest"] == metrics["eval_shortest"] == 5, metrics
