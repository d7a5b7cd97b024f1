"""Training the Transformer: it learns a toy task, gradient accumulation is exact, and Seq2SeqTrainer runs."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

from encdec import TransformerSeq2SeqForConditionalGeneration
from toy import BOS, EOS, PAD, TOY_VOCAB_SIZE, digit_tokenizer, exact_match, right_pad, toy_examples


@pytest.mark.slow
def test_model_learns_to_reverse_digit_sequences(tiny_transformer_config, reverse_batch, train_reverse) -> None:
    config = tiny_transformer_config(vocab_size=TOY_VOCAB_SIZE, d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, dropout=0.0, normalize_before=True)
    model = TransformerSeq2SeqForConditionalGeneration(config)
    input_ids, attention_mask, labels = reverse_batch(200, torch.Generator().manual_seed(10_000))
    # the held-out sources never appear in training (only short ones could collide by chance)
    held_out = {tuple(row) for row in input_ids.tolist()}
    losses = train_reverse(model, steps=300, batch_size=64, lr=2e-3, seed=0, warmup=30, exclude=held_out)
    assert sum(losses[-10:]) / 10 < 0.1 * sum(losses[:10]) / 10

    model.eval()
    generated = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=10, do_sample=False)
    assert exact_match(generated, labels) >= 0.98


def test_gradient_accumulation_with_num_items_equals_one_big_batch(make_transformer, reverse_batch) -> None:
    model = make_transformer(vocab_size=TOY_VOCAB_SIZE).train()
    input_ids, attention_mask, labels = reverse_batch(8, torch.Generator().manual_seed(3))
    halves = [slice(0, 4), slice(4, 8)]
    counts = [int((labels[h] != -100).sum()) for h in halves]
    assert counts[0] != counts[1]  # otherwise a plain mean of means would be exact too

    def grads() -> list[torch.Tensor]:
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        return grads

    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    big_batch = grads()
    num_items = torch.tensor(sum(counts))
    for h in halves:
        model(input_ids=input_ids[h], attention_mask=attention_mask[h], labels=labels[h],
              num_items_in_batch=num_items).loss.backward()
    accumulated = grads()
    for h in halves:  # what a loss that ignores num_items_in_batch would give under accumulation
        (model(input_ids=input_ids[h], attention_mask=attention_mask[h], labels=labels[h]).loss / 2).backward()
    mean_of_means = grads()

    for a, b in zip(accumulated, big_batch, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(mean_of_means, big_batch, strict=True))


def _toy_dataset(n: int, seed: int) -> Dataset:
    """``n`` toy examples of 3-6 digits, the sources without EOS (as the digit tokenizer encodes them)."""
    return Dataset.from_list(toy_examples(n, seed, max_len=6, source_eos=False))


def test_digit_tokenizer_and_collator(make_transformer) -> None:
    tokenizer = digit_tokenizer()
    assert tokenizer("3 1 4")["input_ids"] == [6, 4, 7]
    model = make_transformer(vocab_size=TOY_VOCAB_SIZE)
    collator = DataCollatorForSeq2Seq(tokenizer=tokenizer, model=model)
    batch = collator([{"input_ids": [6, 4, 7], "labels": [7, 4, 6, EOS]}, {"input_ids": [5, 5], "labels": [5, EOS]}])
    assert batch["input_ids"].tolist() == [[6, 4, 7], [5, 5, PAD]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[7, 4, 6, EOS], [5, EOS, -100, -100]]
    assert batch["decoder_input_ids"].tolist() == [[BOS, 7, 4, 6], [BOS, 5, EOS, PAD]]


def test_seq2seq_trainer_runs_with_label_smoothing_accumulation_and_generation(tmp_path, make_transformer) -> None:
    tokenizer = digit_tokenizer()
    model = make_transformer(vocab_size=TOY_VOCAB_SIZE, d_model=32, encoder_layers=1, decoder_layers=1,
                             encoder_ffn_dim=64, decoder_ffn_dim=64)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, per_device_eval_batch_size=16,
        gradient_accumulation_steps=2, max_steps=40, learning_rate=1e-2, warmup_steps=4,
        label_smoothing_factor=0.1, predict_with_generate=True, generation_max_length=10, generation_num_beams=1,
        logging_steps=1, save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )

    def compute_metrics(prediction) -> dict[str, float]:
        predictions = torch.as_tensor(prediction.predictions)
        return {"exact_match": exact_match(predictions, torch.as_tensor(prediction.label_ids))}

    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=_toy_dataset(1280, seed=0),
        eval_dataset=_toy_dataset(32, seed=1), processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer=tokenizer, model=model), compute_metrics=compute_metrics,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 40 and all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2

    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_loss"])
    # The Trainer generates for padded batches of 16: each predicted row is what greedy decoding of its source alone
    # (no padding) gives, and the exact match is the one of those rows (0 after 40 steps: the rows, of varied
    # lengths, are what this check sees).
    examples = _toy_dataset(32, seed=1)
    model.eval()
    with torch.no_grad():
        alone = [model.generate(torch.tensor([example["input_ids"]]), max_length=10, num_beams=1,
                                do_sample=False)[0].tolist() for example in examples]
    labels = right_pad([example["labels"] for example in examples], value=-100)
    assert metrics["eval_exact_match"] == exact_match(right_pad(alone), labels)
    predicted = trainer.predict(examples).predictions.tolist()
    assert [row[: len(mine)] for row, mine in zip(predicted, alone, strict=True)] == alone
    predictions = trainer.predict(_toy_dataset(4, seed=2)).predictions
    # generation stops at generation_max_length=10; Trainer pads the rest (to the generation config's max_length)
    assert predictions.shape[0] == 4 and predictions.shape[1] >= 10
    assert (predictions[:, 10:] == PAD).all()
    assert (predictions[:, 0] == BOS).all()
