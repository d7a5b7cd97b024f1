"""The multi-process worker behind tests/test_distributed.py; run it under a launcher, on CPU processes (gloo)::

    torchrun --nproc_per_node 2 tests/distributed_worker.py fsdp --family transformer --output runs/fsdp-transformer

Subcommands: ``fsdp`` (train a tiny model on the toy task under FSDP, save a normal folder), ``ddp-check`` (every
model variant under Trainer's DDP with ``find_unused_parameters=False``: each parameter gets a gradient, nothing is
reported unused), ``evaluate`` (generation-based BLEU/chrF of a model folder, predictions split between the
processes), ``cli`` (``encdec`` itself), ``token-batches`` (the batches each process
trains on with ``training.max_tokens``) and ``batch`` (several of these in one launch, to pay the start-up once).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from datasets import Dataset
from torch import nn
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    PreTrainedModel,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

import encdec  # noqa: F401  (registers the Auto classes)
from cpu_fsdp import fsdp_units, save_full_model, shard_model, wrap_fsdp1
from encdec import TransformerSeq2SeqConfig
from encdec.data import load_data
from encdec.metrics import build_compute_metrics
from encdec.processes import cpu_processes, process_state
from encdec.tokenization import load_tokenizer
from encdec.training import EncdecTrainer, load_run_config, tokenize_splits, training_arguments
from encdec_cli import main as encdec_main
from toy import TINY_MODELS, TWO_LAYER_TRANSFORMER, collate, toy_examples, toy_model

# the tiny models the worker trains (over the toy vocabulary): two Transformer layers a side, tied RNN embeddings
TIED_RNN = {**TINY_MODELS["rnn"], "tie_word_embeddings": True}
WORKER_MODELS = {"transformer": TWO_LAYER_TRANSFORMER, "rnn": TIED_RNN}
# every RNN attention variant (and input feeding on and off, and a GRU), then the Transformer
DDP_VARIANTS: dict[str, dict[str, Any]] = {
    "rnn-none": {**TIED_RNN, "attention": "none", "bidirectional_encoder": False},
    "rnn-bahdanau": TIED_RNN,
    "rnn-luong_dot": {**TIED_RNN, "attention": "luong_dot", "bidirectional_encoder": False},
    "rnn-luong_general": {**TIED_RNN, "attention": "luong_general"},
    "rnn-luong_concat": {**TIED_RNN, "attention": "luong_concat"},
    "rnn-luong_general-no-input-feeding": {**TIED_RNN, "attention": "luong_general", "input_feeding": False},
    "rnn-gru-bahdanau": {**TIED_RNN, "cell_type": "gru"},
    "transformer": TWO_LAYER_TRANSFORMER,
}


def train_steps(model: PreTrainedModel, examples: Sequence[dict], steps: int, batch_size: int,
                lr: float = 3e-3, api: str = "fsdp2") -> list[float]:
    """A plain AdamW loop over consecutive batches of ``batch_size`` examples (the global batch). Under several
    processes the model is sharded with ``shard_model`` and each process takes a contiguous slice of every batch.
    The loss of each process is its summed token loss over the token count of the whole batch, times the number of
    processes (FSDP averages the gradients over the processes), so the gradient is that of one process on the whole
    batch. ``api`` picks FSDP2 (``shard_model``) or FSDP1 (``wrap_fsdp1``). Returns the loss of each step (of the
    whole batch)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    if batch_size % world:
        raise ValueError(f"The batch of {batch_size} examples does not split evenly between {world} processes.")
    if world > 1:
        model = shard_model(model) if api == "fsdp2" else wrap_fsdp1(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    per_process = batch_size // world
    for step in range(steps):
        batch = examples[step * batch_size: (step + 1) * batch_size]
        inputs = collate(batch[rank * per_process: (rank + 1) * per_process])
        tokens = (inputs["labels"] != -100).sum()
        if world > 1:
            dist.all_reduce(tokens)
        loss = model(**inputs, num_items_in_batch=tokens).loss  # this process's summed loss / all tokens
        (loss * world).backward()
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach().clone()
        if world > 1:
            dist.all_reduce(total)
        losses.append(total.item())
    return losses


# --- the worker's subcommands ----------------------------------------------------------------------------------------

def _write_json(path: str | os.PathLike, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def run_fsdp(args: argparse.Namespace) -> int:
    """Train a tiny model of ``args.family`` under FSDP for ``args.steps`` steps and save it to ``args.output``."""
    state = process_state()
    model = toy_model(WORKER_MODELS[args.family], seed=args.seed)
    unit_ids = {id(unit) for unit in fsdp_units(model)}
    units = [name for name, module in model.named_modules() if id(module) in unit_ids]
    examples = toy_examples(args.steps * args.batch_size, seed=args.seed)
    losses = train_steps(model, examples, args.steps, args.batch_size, lr=args.lr, api=args.api)
    if args.api == "fsdp2":
        save_full_model(model, args.output)
    if state.is_main_process:
        _write_json(Path(args.output) / "fsdp_run.json", {"losses": losses, "units": units,
                                                          "num_processes": state.num_processes})
    return 0


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_ddp_check(args: argparse.Namespace) -> int:
    """Train every ``DDP_VARIANTS`` model for ``args.steps`` steps with ``EncdecTrainer`` (DDP,
    ``find_unused_parameters=False``); record per variant the parameters without a gradient at each optimiser
    step, the warnings and the DDP flag. Writes ``<output>/rank<N>.json``."""
    class GradientCheck(TrainerCallback):
        def __init__(self, model: nn.Module) -> None:
            self.model, self.missing = model, set()

        def on_pre_optimizer_step(self, training_args, trainer_state, control, **kwargs):
            self.missing |= {name for name, p in self.model.named_parameters() if p.grad is None}

    state = process_state()
    handler = _Records()
    loggers = [logging.getLogger(), logging.getLogger("transformers"), logging.getLogger("torch")]
    report = {}
    for name, values in DDP_VARIANTS.items():
        model = toy_model(values)
        check = GradientCheck(model)
        examples = toy_examples(args.steps * args.batch_size * state.num_processes, seed=1)
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for log in loggers:
                log.addHandler(handler)
            try:
                training_args = Seq2SeqTrainingArguments(
                    output_dir=tmp, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                    learning_rate=1e-3, save_strategy="no", report_to=[], logging_steps=1, disable_tqdm=True,
                    ddp_find_unused_parameters=False, use_cpu=cpu_processes())
                trainer = EncdecTrainer(model=model, args=training_args, train_dataset=Dataset.from_list(examples),
                                        data_collator=collate, callbacks=[check])
                trainer.train()
            finally:
                for log in loggers:
                    log.removeHandler(handler)
        wrapped = trainer.model_wrapped
        report[name] = {
            "ddp": type(wrapped).__name__,
            "find_unused_parameters": getattr(wrapped, "find_unused_parameters", None),
            "without_gradient": sorted(check.missing),
            "warnings": [str(w.message) for w in caught] + handler.messages,
            "global_step": trainer.state.global_step,
        }
        handler.messages = []
    _write_json(Path(args.output) / f"rank{state.process_index}.json",
                {"num_processes": state.num_processes, "variants": report})
    return 0


def evaluate_folder(model_dir: str | os.PathLike, config, split: str = "validation") -> dict[str, float]:
    """Generation-based evaluation of a saved model folder on a run config's ``split``: the evaluation ``encdec
    train`` ends with (``EncdecTrainer.evaluate``, ``predict_with_generate``, BLEU/chrF, the same Trainer
    arguments). Under a launcher the examples are split between the processes and the predictions gathered (the
    padding Accelerate adds to even out the shares is dropped). Returns the metrics without the split prefix."""
    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=True)
    tokenized, _ = tokenize_splits(load_data(config.data), tokenizer, config.training)
    d_model = getattr(model.config, "d_model", None) or model.config.hidden_size
    with tempfile.TemporaryDirectory() as tmp:
        args = training_arguments(config, Path(tmp), d_model, has_eval=False)  # no evaluation schedule: one call
        trainer = EncdecTrainer(model=model, args=args, data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
                                processing_class=tokenizer, compute_metrics=build_compute_metrics(tokenizer))
        metrics = trainer.evaluate(tokenized[split], metric_key_prefix=split)
    return {key.removeprefix(f"{split}_"): value for key, value in metrics.items()}


def run_evaluate(args: argparse.Namespace) -> int:
    state = process_state()
    metrics = evaluate_folder(args.model, load_run_config(args.config, args.overrides), args.split)
    if state.is_main_process:
        _write_json(args.output, {**metrics, "num_processes": state.num_processes})
    return 0


# the run-config overrides of the token-batches job: batches of at most 64 padded tokens
TOKEN_BATCHING = ["--training.max_tokens", "64", "--training.max_source_length", "32", "--training.max_target_length",
                  "32", "--training.seed", "7"]


def run_token_batches(args: argparse.Namespace) -> int:
    """The batches each process's training dataloader yields in epochs 0 and 1 with ``TOKEN_BATCHING`` (the
    Trainer's own ``get_train_dataloader``, prepared by accelerate), as lists of training-pair indices, written to
    ``rank<N>.json``."""
    config = load_run_config(args.config, TOKEN_BATCHING)
    tokenizer = load_tokenizer(args.tokenizer)
    tokenized, _ = tokenize_splits(load_data(config.data), tokenizer, config.training, config.data)
    train_set = tokenized["train"]
    index = {tuple(ids): i for i, ids in enumerate(train_set["input_ids"])}
    model = AutoModelForSeq2SeqLM.from_config(TransformerSeq2SeqConfig(**TWO_LAYER_TRANSFORMER))
    with tempfile.TemporaryDirectory() as tmp:
        arguments = training_arguments(config, Path(tmp), 16, has_eval=False)
        trainer = EncdecTrainer(model=model, args=arguments, train_dataset=train_set,
                                data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
                                max_tokens=config.training.max_tokens)
        loader = trainer.get_train_dataloader()
        epochs = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            epochs.append([[index[tuple(row[mask.bool()].tolist())] for row, mask in
                            zip(batch["input_ids"], batch["attention_mask"], strict=True)] for batch in loader])
    _write_json(Path(args.output) / f"rank{process_state().process_index}.json", epochs)
    return 0


def run_cli(args: argparse.Namespace) -> int:
    return encdec_main(args.argv)


def run_batch(args: argparse.Namespace) -> int:
    """Run each command line of the JSON list ``args.jobs`` (e.g. ``[["fsdp", "--family", "rnn", ...], ["cli",
    "train", ...]]``) in turn in these processes; stop at the first that fails."""
    for job in json.loads(Path(args.jobs).read_text()):
        status = main(job)
        if status:
            return status
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tests/distributed_worker.py",
                                     description="Multi-process jobs and checks; run under accelerate launch or "
                                                 "torchrun.")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("fsdp", help="train a tiny model on the toy task under FSDP and save a normal folder")
    p.add_argument("--family", choices=sorted(WORKER_MODELS), required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16, help="the global batch (split between the processes)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api", choices=["fsdp2", "fsdp1"], default="fsdp2",
                   help="fsdp2: fully_shard per unit, then save a folder; fsdp1: Accelerate's auto-wrap, losses only")
    p.set_defaults(func=run_fsdp)
    p = commands.add_parser("ddp-check", help="every model variant under Trainer's DDP: unused parameters, warnings")
    p.add_argument("--output", required=True, help="folder for rank<N>.json")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=4, help="per process")
    p.set_defaults(func=run_ddp_check)
    p = commands.add_parser("evaluate", help="BLEU/chrF of a model folder on a run config's split (Trainer)")
    p.add_argument("--model", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--split", default="validation")
    p.add_argument("--output", required=True, help="JSON file for the metrics")
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="--section.key value pairs for the run config")
    p.set_defaults(func=run_evaluate)
    p = commands.add_parser("token-batches", help="the training batches of each process with training.max_tokens")
    p.add_argument("--config", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--output", required=True, help="folder for rank<N>.json")
    p.set_defaults(func=run_token_batches)
    p = commands.add_parser("cli", help="an encdec command line, e.g. `cli train CONFIG.yaml --training.max_steps 5`")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=run_cli)
    p = commands.add_parser("batch", help="several of these command lines (a JSON list of lists) in one launch")
    p.add_argument("jobs")
    p.set_defaults(func=run_batch)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
