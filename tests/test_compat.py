"""Every transformers release from the floor to the newest: the cache under either name (5.24 renamed
`past_key_values` to `cache`), returned under the running release's, and no deprecation warning from encdec's own
code. CI runs the whole suite on the newest release and on the floor (.ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateBeamEncoderDecoderOutput
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput

from encdec.models.compat import CACHE_NAME, cache_argument, cache_field, cache_of
from toy import BOS, TEST_TRANSFORMER, rnn_variant, source_batch, target_batch, tiny_model
from toy import RANDOM_VOCAB_SIZE as VOCAB

TESTS = Path(__file__).parent


def build(name: str):
    return tiny_model(TEST_TRANSFORMER, vocab_size=VOCAB) if name == "transformer" else rnn_variant(name)


def test_the_cache_name_is_the_running_releases() -> None:
    for output_class in (Seq2SeqLMOutput, Seq2SeqModelOutput, GenerateBeamEncoderDecoderOutput):
        names = {field.name for field in fields(output_class)}
        assert CACHE_NAME in names and ({"cache", "past_key_values"} - {CACHE_NAME}).isdisjoint(names)


def holding(tokens: int) -> DynamicCache:
    """A one-layer cache holding ``tokens`` positions (none: an empty cache, as generate makes)."""
    cache = DynamicCache()
    if tokens:
        cache.update(torch.zeros(1, 1, tokens, 2), torch.zeros(1, 1, tokens, 2), 0)
    return cache


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_cache_argument_takes_either_name_and_the_new_one_first() -> None:
    """Both names at once: the new one wins (transformers' `deprecate_kwarg` rule), unless it is empty and the old one
    is not (5.24's generate under PEFT's prefix tuning: generate's fresh cache beside the prefix)."""
    cache, old, empty = holding(2), holding(3), holding(0)
    assert cache_argument(cache, None) is cache and cache_argument(None, cache) is cache
    assert cache_argument(None, None) is None
    assert cache_argument(cache, old) is cache and cache_argument(cache, empty) is cache
    assert cache_argument(empty, old) is old
    assert cache_argument(empty, holding(0)) is empty


@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm", "luong_general-gru"])
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")  # 5.24 (test_transformer_contract)
@torch.no_grad()
def test_forward_takes_the_cache_under_either_name(name: str) -> None:
    """A prefix, then the rest from its cache, given as `cache` or as `past_key_values`, to the LM and to the bare
    model: the same logits as one call, and the cache comes back under the running release's name."""
    model = build(name).eval()
    input_ids, attention_mask = source_batch()
    target = torch.cat([torch.full((3, 1), BOS), target_batch(3, 5)], dim=1)
    for module in (model, model.model):
        full = module(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target, use_cache=False)
        full = full.logits if module is model else full.last_hidden_state
        for keyword in ("cache", "past_key_values"):
            prefix = module(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target[:, :2])
            cache = cache_of(prefix)
            assert cache is not None and cache.get_seq_length() == 2 and CACHE_NAME in prefix
            rest = module(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target[:, 2:],
                          **{keyword: cache})
            assert cache_of(rest) is cache and cache.get_seq_length() == target.size(1)
            pieces = [prefix, rest]
            got = torch.cat([p.logits if module is model else p.last_hidden_state for p in pieces], dim=1)
            torch.testing.assert_close(got, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["transformer", "bahdanau-lstm"])
@torch.no_grad()
def test_generate_returns_and_continues_from_the_cache_under_the_release_name(name: str) -> None:
    model = build(name).eval()
    input_ids, attention_mask = source_batch()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, return_dict_in_generate=True)
    once = model.generate(**kwargs, max_new_tokens=5, min_new_tokens=5, num_beams=2)
    assert cache_of(once) is not None and CACHE_NAME in once
    first = model.generate(**kwargs, max_new_tokens=3, min_new_tokens=3)
    second = model.generate(**kwargs, max_new_tokens=2, min_new_tokens=2, decoder_input_ids=first.sequences,
                            **cache_field(cache_of(first)))
    assert torch.equal(second.sequences, model.generate(**kwargs, max_new_tokens=5, min_new_tokens=5).sequences)


NOISE_FREE = textwrap.dedent('''
    import sys, warnings
    sys.path.insert(0, sys.argv[1])
    warnings.simplefilter("error", FutureWarning)  # any deprecation from transformers fails the run
    import torch
    from datasets import Dataset
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments
    from encdec.models.compat import cache_field, cache_of
    from toy import TEST_TRANSFORMER, collate, rnn_variant, tiny_model, toy_examples

    for model in (tiny_model(TEST_TRANSFORMER, vocab_size=23), rnn_variant("bahdanau-lstm")):
        ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])
        mask = (ids != 0).long()
        model.eval()
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, labels=ids)
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, num_beams=2,
                                 return_dict_in_generate=True)
            cache_of(out).get_seq_length()
            first = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True)
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, decoder_input_ids=first.sequences,
                           **cache_field(cache_of(first)))
            model.generate(input_ids=ids[:1], attention_mask=mask[:1], max_new_tokens=4, prompt_lookup_num_tokens=2)
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=True)
        examples = Dataset.from_list(toy_examples(8))
        args = Seq2SeqTrainingArguments(output_dir=sys.argv[2], per_device_train_batch_size=4, max_steps=2,
                                        predict_with_generate=True, generation_max_length=6, report_to=[],
                                        use_cpu=True, save_strategy="no", logging_strategy="no")
        trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=examples, eval_dataset=examples,
                                 data_collator=collate)
        trainer.train()
        trainer.evaluate()
        trainer.predict(examples)
    print("done")
''')


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
def test_no_deprecation_warning_from_encdec_code(tmp_path: Path) -> None:
    """Forward, generate (beam, continued, prompt lookup, sampling) and Seq2SeqTrainer's training, evaluation and
    prediction print no deprecation warning: FutureWarnings are errors, and transformers' logged "deprecated"
    lines (once per process, hence a fresh process) must not appear."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", NOISE_FREE, str(TESTS), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("done"), done.stderr[-3000:]
    noise = [line for line in done.stderr.splitlines() if "deprecat" in line.lower() or "past_key_values" in line]
    assert not noise, noise
