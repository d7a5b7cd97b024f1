"""``EncdecTrainer``: ``Seq2SeqTrainer`` with token batching, length grouping read from Arrow, evaluation that
leaves the model's generation config and the gathered predictions as they should be, and a multilingual model's
evaluation scored direction by direction, each with its target language token forced."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from datasets import Dataset
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_utils import EvalLoopOutput

from ..data import LengthGroupedPairs, TokenBatchSampler, column_lengths, pair_lengths, plan_summary
from ..processes import is_main_process
from ..tokenization import tokenizer_languages

logger = logging.getLogger(__name__)


class SamplerEpoch(TrainerCallback):
    """Sets the token batch sampler's epoch at the start of each epoch. The Trainer sets it too, except in one case:
    resuming mid-epoch with several processes, where the sampler sits under two accelerate wrappers
    (``SkipBatchSampler`` around ``BatchSamplerShard``) that pass no epoch on. ``state.epoch`` then is the
    checkpoint's (e.g. 1.6: epoch 1)."""

    def __init__(self, trainer: EncdecTrainer) -> None:
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        if self.trainer.token_sampler is not None:
            self.trainer.token_sampler.set_epoch(int(state.epoch or 0))


class EncdecTrainer(Seq2SeqTrainer):
    """``Seq2SeqTrainer`` whose evaluation leaves the model's generation config as it found it, and which batches by
    tokens when ``max_tokens`` is set.

    ``Seq2SeqTrainer.prediction_step`` fills transformers' defaults into ``model.generation_config`` (``max_length``
    = 20), after which every ``generate()`` warns that both length limits are set (that 20 and the model's saved
    budget), and the saved ``generation_config.json`` carries the stray 20.
    """

    def __init__(self, *args: Any, max_tokens: int | None = None, **kwargs: Any) -> None:
        self.max_tokens, self.token_sampler = max_tokens, None
        super().__init__(*args, **kwargs)
        if max_tokens is not None:
            self.add_callback(SamplerEpoch(self))

    def prediction_step(self, *args, **kwargs):
        config = self.model.generation_config
        max_length = config.max_length
        try:
            return super().prediction_step(*args, **kwargs)
        finally:
            config.max_length = max_length

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        """With ``max_tokens``, batches by tokens (``encdec.data.batching``) instead of a fixed sentence count; with
        ``group_by_length``, the Trainer's length-grouped order with the lengths read from Arrow, not example by
        example (``LengthGroupedPairs``)."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.max_tokens is None:
            if self._groups_tokenized(dataset):
                return LengthGroupedPairs(self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                          column_lengths(dataset, "input_ids"))
            return super()._get_train_sampler(train_dataset)
        source, target = pair_lengths(dataset)
        sampler = TokenBatchSampler(np.maximum(source, target), self.max_tokens, seed=self.args.seed,
                                    world_size=self.args.world_size, rank=self.args.process_index)
        self.token_sampler = sampler
        if is_main_process():
            plan = sampler.batches(0)
            per_step = self.args.gradient_accumulation_steps * self.args.world_size  # batches an optimizer step
            logger.info("batches by tokens (max_tokens %d): %s; %d batches a step", self.max_tokens,
                        plan_summary(source, target, plan, per_step), per_step)
        return sampler

    def _groups_tokenized(self, dataset: Any) -> bool:
        """``group_by_length`` is on and ``dataset`` is a tokenized ``datasets.Dataset`` (its lengths are in Arrow)."""
        return _groups_by_length(self.args) and isinstance(dataset, Dataset) and "input_ids" in dataset.column_names

    def _get_eval_sampler(self, eval_dataset: Any) -> Any:
        """With ``group_by_length`` the Trainer orders evaluation by length too (seeded): the same order, with the
        lengths read from Arrow (``LengthGroupedPairs``)."""
        if self._groups_tokenized(eval_dataset):
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return LengthGroupedPairs(self.args.eval_batch_size, column_lengths(eval_dataset, "input_ids"),
                                      generator=torch.Generator().manual_seed(seed))  # a split may lack labels
        return super()._get_eval_sampler(eval_dataset)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """Loading the best checkpoint at the end: with tied embeddings the checkpoint stores the shared matrix once
        (safetensors keeps one copy), so ``load_state_dict`` reports its aliases (``lm_head.weight``, the decoder
        embedding) as missing, and transformers warned about it on every run. They are not missing: they are the
        loaded matrix itself. Only keys that are really absent are reported."""
        tied = set(self.model._tied_weights_keys or {}) if self.model.config.tie_word_embeddings else set()
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def evaluation_loop(self, dataloader: Any, description: str, prediction_loss_only: bool | None = None,
                        ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval") -> EvalLoopOutput:
        """Several processes: ``Seq2SeqTrainer.evaluate``/``predict`` gather with ``accelerator.gather`` (transformers
        PR #27025, for ``num_return_sequences`` > 1), which keeps the examples Accelerate repeats to even out the
        processes' last batches: BLEU would count some sentences twice whenever the split is not a multiple of
        processes x batch. With one sequence per example, ``gather_for_metrics`` drops the repeats.

        A multilingual model's split is scored direction by direction (``evaluate_directions``)."""
        returned = (getattr(self, "_gen_kwargs", None) or {}).get("num_return_sequences") \
            or getattr(self.model.generation_config, "num_return_sequences", None) or 1
        if returned == 1:
            self.gather_function = self.accelerator.gather_for_metrics
        directions = self.directions(dataloader.dataset)
        if directions:
            return self.evaluate_directions(directions, description, prediction_loss_only, ignore_keys,
                                            metric_key_prefix)
        return super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)

    def directions(self, dataset: Any) -> dict[str, tuple[int, Dataset]] | None:
        """A multilingual model's tokenized split, direction by direction: ``{"de-en": (the id of __en__, its
        rows)}``, in the order of the model's languages, read from each row's first source and label token (its
        language tokens). None for a bilingual model, a split without labels, or rows without language tokens."""
        languages = tokenizer_languages(self.processing_class)
        if not languages or not isinstance(dataset, Dataset) or "labels" not in dataset.column_names:
            return None
        ids = {self.processing_class.get_lang_id(language): index for index, language in enumerate(languages)}
        table = dataset.select_columns(["input_ids", "labels"]).with_format("arrow")[:]
        firsts = [pc.list_element(table.column(column), 0).to_numpy() for column in ("input_ids", "labels")]
        if not all(np.isin(first, list(ids)).all() for first in firsts):
            return None
        keys = np.vectorize(ids.get)(firsts[0]) * len(languages) + np.vectorize(ids.get)(firsts[1])
        return {f"{languages[key // len(languages)]}-{languages[key % len(languages)]}":
                (self.processing_class.get_lang_id(languages[key % len(languages)]),
                 dataset.select(np.flatnonzero(keys == key)))
                for key in np.unique(keys)}

    def evaluate_directions(self, directions: dict[str, tuple[int, Dataset]], description: str,
                            prediction_loss_only: bool | None, ignore_keys: list[str] | None,
                            metric_key_prefix: str) -> EvalLoopOutput:
        """Each direction evaluated on its own rows with its target language token forced (``forced_bos_token_id``
        in the generation keywords, as at inference), reported as ``{prefix}_{direction}_{metric}`` (e.g.
        ``eval_de-en_bleu``), and their unweighted average as ``{prefix}_{metric}``: ``metric_for_best_model`` and
        early stopping choose on the average over directions. The predictions are not returned."""
        kept = getattr(self, "_gen_kwargs", {})
        outputs = {}
        try:
            for name, (target_id, part) in directions.items():
                self._gen_kwargs = {**kept, "forced_bos_token_id": target_id}
                loader = self.get_eval_dataloader(part)
                outputs[name] = super().evaluation_loop(loader, description, prediction_loss_only, ignore_keys,
                                                        f"{metric_key_prefix}_{name}")
        finally:
            self._gen_kwargs = kept
        metrics = {key: value for output in outputs.values() for key, value in output.metrics.items()}
        first = next(iter(outputs))
        for key in outputs[first].metrics:
            metric = key.removeprefix(f"{metric_key_prefix}_{first}_")
            values = [metrics.get(f"{metric_key_prefix}_{name}_{metric}") for name in outputs]
            if metric != "model_preparation_time" and all(isinstance(v, int | float) for v in values):
                metrics[f"{metric_key_prefix}_{metric}"] = round(float(np.mean(values)), 4)
        return EvalLoopOutput(predictions=None, label_ids=None, metrics=metrics,
                              num_samples=sum(output.num_samples for output in outputs.values()))


def _groups_by_length(args: Seq2SeqTrainingArguments) -> bool:
    """Whether the arguments ask for the Trainer's length-grouped order (either name, see ``length_grouping``)."""
    return getattr(args, "train_sampling_strategy", None) == "group_by_length" or bool(getattr(args, "group_by_length",
                                                                                               False))
