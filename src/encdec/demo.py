"""``make demo``: train a small Transformer on the built-in date task with ``Seq2SeqTrainer``, save it as a
Hub-style folder, reload it through the Auto classes and translate held-out examples.

Run: ``python -m encdec.demo [--output-dir runs/demo-transformer] [--max-steps N]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    GenerationConfig,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from .data import make_date_splits
from .models import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration
from .tokenization import special_token_ids, train_tokenizer


def tokenize_pairs(pairs: list[tuple[str, str]], tokenizer, max_length: int = 64) -> Dataset:
    """(source, target) pairs -> a ``datasets.Dataset`` of input_ids / attention_mask / labels."""
    dataset = Dataset.from_dict({"source": [s for s, _ in pairs], "target": [t for _, t in pairs]})
    return dataset.map(
        lambda batch: tokenizer(batch["source"], text_target=batch["target"], max_length=max_length, truncation=True),
        batched=True, remove_columns=["source", "target"],
    )


def exact_match(model, tokenizer, pairs: list[tuple[str, str]], batch_size: int = 128) -> tuple[float, list[str]]:
    """Greedy-decode every source and return the share that equals its target exactly, and the outputs."""
    outputs: list[str] = []
    model.eval()
    for i in range(0, len(pairs), batch_size):
        sources = [s for s, _ in pairs[i:i + batch_size]]
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        with torch.inference_mode():
            generated = model.generate(**batch, max_new_tokens=16)
        outputs += tokenizer.batch_decode(generated, skip_special_tokens=True)
    hits = sum(out.strip() == target for out, (_, target) in zip(outputs, pairs, strict=True))
    return hits / max(len(pairs), 1), outputs


def run(output_dir: Path, max_steps: int, seed: int) -> float:
    torch.manual_seed(seed)
    splits = make_date_splits(train=20000, validation=500, test=500, seed=seed)
    tokenizer = train_tokenizer([s for pair in splits["train"] for s in pair], vocab_size=400)
    config = TransformerSeq2SeqConfig(
        d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=256, decoder_ffn_dim=256, dropout=0.1, max_position_embeddings=64,
        **special_token_ids(tokenizer),
    )
    model = TransformerSeq2SeqForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id, bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, max_new_tokens=16, num_beams=1,
    )
    print(f"Transformer: {model.num_parameters():,} parameters, vocabulary {len(tokenizer)}")
    args = Seq2SeqTrainingArguments(
        output_dir=str(output_dir / "checkpoints"), max_steps=max_steps, per_device_train_batch_size=64,
        learning_rate=1e-3, warmup_steps=max_steps // 10, lr_scheduler_type="inverse_sqrt", weight_decay=0.0,
        label_smoothing_factor=0.1, logging_steps=max(max_steps // 10, 1), save_strategy="no", report_to=[],
        use_cpu=True, seed=seed, disable_tqdm=False,
    )
    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=tokenize_pairs(splits["train"], tokenizer),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), processing_class=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    print(f"trained {max_steps} steps in {time.perf_counter() - start:.0f} s")
    trainer.save_model(str(output_dir))  # model, config, generation config, code files, tokenizer

    reloaded = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(output_dir)
    score, outputs = exact_match(reloaded, reloaded_tokenizer, splits["test"])
    print(f"exact match on {len(splits['test'])} held-out dates: {score:.1%}")
    for (source, target), output in list(zip(splits["test"], outputs, strict=True))[:8]:
        print(f"  {source!r:34} -> {output!r:14} (expected {target!r})")
    print(f"model folder: {output_dir}")
    return score


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=Path("runs/demo-transformer"))
    parser.add_argument("--max-steps", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run(args.output_dir, args.max_steps, args.seed)


if __name__ == "__main__":
    main()
