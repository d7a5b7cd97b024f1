"""Model cards: the README.md of a model folder, rendered from its family's template, with BLEU/chrF in the
Hub's ``model-index``; and read back: ``model_languages`` is the one place a model's languages are read (any number of
them, in the card's order).

The templates are ``encdec/model_cards/<family>.md`` (package data, so that an installed encdec renders cards too).
They are Jinja2 templates (Jinja2 comes with torch) rendered with ``StrictUndefined``: a misspelt placeholder fails
instead of printing nothing.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import PreTrainedModel

from .errors import EncdecError
from .folders import FAMILIES, PIPELINE_TASK, config_and_size, read_json, require_dir
from .io_utils import atomic_write_text, refuse_existing
from .version import __version__

logger = logging.getLogger(__name__)


def card_template(family: str) -> str:
    """The Jinja2 model-card template of ``family``, read from the package data."""
    if family not in FAMILIES:
        raise EncdecError(f"No model card template for family {family!r}; choose one of {list(FAMILIES)}.")
    return (resources.files("encdec") / "model_cards" / f"{family}.md").read_text(encoding="utf-8")


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _eval_results(metrics: Mapping[str, Any], dataset_name: str, dataset_type: str) -> list[EvalResult]:
    split = metrics.get("split")
    results = []
    for key, name in (("bleu", "BLEU"), ("bleu_lowercase", "BLEU (lowercased)"), ("chrf", "chrF")):
        if metrics.get(key) is not None:
            results.append(EvalResult(task_type="translation", task_name="Translation", dataset_type=dataset_type,
                                      dataset_name=dataset_name, dataset_split=split, metric_type=key.split("_")[0],
                                      metric_name=name, metric_value=metrics[key],
                                      metric_config="lowercase" if key == "bleu_lowercase" else None))
    return results


def fill_template(template: str, **values: Any) -> str:
    """``template`` rendered with ``values``; a name the template uses but ``values`` lacks is an error."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                     trim_blocks=True, lstrip_blocks=True, autoescape=False)
    return environment.from_string(template).render(**values)


def render_model_card(model_dir_or_model: str | os.PathLike | PreTrainedModel, *, family: str | None = None,
                      dataset_name: str | None = None, dataset_id: str | None = None, model_name: str | None = None,
                      metrics: Mapping[str, Any] | None = None, training_summary: Mapping[str, Any] | None = None,
                      repo_id: str | None = None, license: str = "apache-2.0",  # noqa: A002 (a Hub key)
                      languages: list[str] | None = None, imported_from: Mapping[str, Any] | None = None) -> str:
    """The README.md model card of a model (object or saved folder) from its family's template.

    :param family: ``transformer_seq2seq`` or ``rnn_seq2seq``; default: the config's ``model_type`` (must agree)
    :param dataset_name: human-readable name of the training/evaluation data
    :param dataset_id: its Hub dataset id, if it has one (goes into ``datasets`` and the model-index)
    :param metrics: ``{"bleu": float, "chrf": float, "bleu_signature": str, "chrf_signature": str,
        "split": str}``, optionally ``"bleu_lowercase"`` and the decoding as ``DecodeOptions.describe`` records it
        (the card shows its beam size; other keys are ignored); the scores go into the ``model-index`` as a
        translation result
    :param training_summary: free-form ``{label: value}`` rows (steps, epochs, hardware, wall time, ...)
    :param repo_id, model_name: the Hub id of the usage snippet; the model's name (default: the id's, else the folder's)
    :param languages: ``[source, target]`` language codes, or a multilingual model's languages (the Hub's
        ``language``; ``encdec serve`` takes a model's language pair from it)
    :param imported_from: ``{"model": hub id or folder, "license": ...}`` of a model ``encdec import`` brought in
    """
    config, num_parameters, default_name = config_and_size(model_dir_or_model)
    family = family or config.model_type
    if family != config.model_type:
        raise EncdecError(f"`family`={family!r} does not match the model's `model_type`={config.model_type!r}; "
                          "leave `family` unset to use the model's.")
    scores = {key: round(float(metrics[key]), 2) for key in ("bleu", "bleu_lowercase", "chrf")
              if (metrics or {}).get(key) is not None}
    metrics = {**metrics, **scores} if scores else None  # without BLEU or chrF, the card says "not evaluated"
    dataset_name = dataset_name or dataset_id
    if metrics and not dataset_name:
        raise EncdecError("`metrics` need the data they were measured on: pass `dataset_name` (or `dataset_id`).")
    model_name = model_name or (repo_id.split("/")[-1] if repo_id else default_name)
    card_data = ModelCardData(
        license=license, library_name="transformers", pipeline_tag="translation", language=languages or None,
        tags=["translation", "seq2seq", "encdec", family], datasets=[dataset_id] if dataset_id else None,
        metrics=sorted({key.split("_")[0] for key in scores}) or None,  # Hub metric ids: bleu, chrf
        model_name=model_name, base_model=_hub_id((imported_from or {}).get("model")),
        eval_results=_eval_results(metrics, dataset_name, dataset_id or _slug(dataset_name)) if metrics else None,
    )
    text = fill_template(  # an imported model's card names its source (and the metadata its Hub id: base_model)
        card_template(family), card_data=card_data.to_yaml(), model_name=model_name,
        model_id=repo_id or "PATH_OR_REPO_ID", family=family, config=config,
        num_parameters=f"{num_parameters:,} ({_human(num_parameters)})", dataset_name=dataset_name,
        dataset_id=dataset_id, metrics=metrics,
        training_summary={key: f"{value:.4g}" if isinstance(value, float) else value
                          for key, value in (training_summary or {}).items()} or None,
        encdec_version=__version__, pipeline_task=PIPELINE_TASK, imported_from=imported_from,
    )
    ModelCard(text)  # parses the metadata block: a broken template fails here, not on the Hub
    return text


def _hub_id(name: str | None) -> str | None:
    """``name`` when it is a Hub model id (``owner/name``) rather than a local folder, else None."""
    if name and re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not os.path.isdir(name):
        return name
    return None


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "custom"


LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:_[A-Za-z]{2,4})?")  # ISO 639-1 or 639-3, optionally a script or region


def data_languages(data: Mapping[str, Any]) -> list[str] | None:
    """``[source, target]`` from a run config's ``data`` section when it names two languages by their codes (``de``,
    ``zh_Hant``), else None: a file suffix such as ``source`` is no language."""
    pair = [data.get("source_lang"), data.get("target_lang")]
    codes = all(isinstance(code, str) and LANGUAGE_CODE.fullmatch(code) for code in pair)
    return pair if codes and pair[0] != pair[1] else None


def read_card(model_dir: str | os.PathLike | None) -> ModelCardData | None:
    """The metadata of the card (README.md) of the model folder ``model_dir``, or None when it has none. A card that
    cannot be read (hand-edited) is logged and read as none: a card never stops a command or the server."""
    path = Path(model_dir) / "README.md" if model_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return ModelCard.load(path).data
    except Exception as error:  # noqa: BLE001 (a broken metadata block: ValueError or a YAML error)
        logger.warning("could not read the model card %s: %s", path, error)
        return None


def card_languages(data: ModelCardData | None) -> tuple[str, ...]:
    """The languages a card's metadata names (the Hub's ``language``: one code or a list of them), in order."""
    language = data.language if data is not None else None
    return tuple(language) if isinstance(language, list) else (language,) if language else ()


def config_languages(model_dir: str | os.PathLike | None) -> tuple[str, ...]:
    """The languages a multilingual model's ``config.json`` records (``languages``, in the model's order); () for a
    bilingual model, a folder without a readable ``config.json`` (an export's), or None."""
    path = Path(model_dir) / "config.json" if model_dir is not None else None
    if path is None or not path.is_file():
        return ()
    try:
        languages = read_json(path, "the model config").get("languages")
    except EncdecError as error:  # a hand-edited config is named where it is loaded; here it says nothing
        logger.warning("%s", error)
        return ()
    return tuple(languages) if isinstance(languages, list) else ()


def model_languages(model_dir: str | os.PathLike | None) -> tuple[str, ...]:
    """The languages of the model in the folder ``model_dir``, in order: those its ``config.json`` records for a
    multilingual model (``config_languages``), else those its card names: ``(source, target)`` for a model that
    ``encdec train`` trained on a language pair (``data_languages``); () without either. ``encdec translate
    --split-sentences`` takes its source language from here, ``encdec serve`` the pair it serves a model as."""
    return config_languages(model_dir) or card_languages(read_card(model_dir))


def training_summary(train_metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The model card's training rows, from Trainer's final training metrics."""
    summary = {"optimiser steps": train_metrics.get("global_step"), "epochs": train_metrics.get("epoch"),
               "wall time (s)": train_metrics.get("train_runtime_total", train_metrics.get("train_runtime")),
               "mean training loss": train_metrics.get("train_loss")}
    if train_metrics.get("resumed_at_step"):  # stopped, then resumed from a checkpoint (encdec.training.TrainingClock)
        if summary["wall time (s)"] is None:
            del summary["wall time (s)"]  # the checkpoint kept no count of the earlier attempts
        summary[f"wall time since resuming at step {train_metrics['resumed_at_step']} (s)"] = \
            train_metrics.get("train_runtime")
    if train_metrics.get("final_weights"):  # training.average_last
        summary["final weights (chosen on validation)"] = train_metrics["final_weights"]
    if train_metrics.get("distilled_from"):  # encdec distill
        summary["distilled from (sequence-level knowledge distillation, Kim and Rush 2016)"] = \
            train_metrics["distilled_from"]
    return summary


def write_model_card(model_dir: str | os.PathLike, *, overwrite: bool = False, **card_kwargs: Any) -> Path:
    """Render the card of the model saved in ``model_dir`` and write it to ``model_dir/README.md`` atomically.
    ``card_kwargs`` are those of ``render_model_card``. An existing README.md is replaced only with ``overwrite``."""
    path = require_dir(model_dir) / "README.md"
    refuse_existing(path, overwrite, "model card", option=None, consent="overwrite=True")
    atomic_write_text(path, render_model_card(model_dir, **card_kwargs))
    return path


def record_scores_in_card(model_dir: str | os.PathLike, results: Mapping[str, Any], dataset_name: str, split: str,
                          dataset_id: str | None = None) -> Path:
    """Rewrite the model card of ``model_dir`` with the scores of ``encdec evaluate`` (``results``) in its text and
    ``model-index``, keeping the training rows that ``encdec train`` recorded in ``eval_results.json``."""
    model_dir = require_dir(model_dir)
    recorded = model_dir / "eval_results.json"
    run = read_json(recorded, "the training results") if recorded.is_file() else {}
    train = run.get("train", {})
    return write_model_card(model_dir, overwrite=True, metrics={**results, "split": split},
                            dataset_name=dataset_name, dataset_id=dataset_id,
                            training_summary=training_summary(train) if train else None,
                            languages=list(config_languages(model_dir))
                            or data_languages(run.get("config", {}).get("data", {})))


__all__ = ["card_languages", "card_template", "config_languages", "data_languages", "model_languages", "read_card",
           "record_scores_in_card", "render_model_card", "training_summary", "write_model_card"]
