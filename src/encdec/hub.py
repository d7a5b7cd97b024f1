"""Shipping a trained model: the pipeline-ready folder, translation of many lines, the model card, folder checks
and the push to the Hugging Face Hub.

A shippable folder holds exactly what ``check_model_folder`` lists: ``config.json`` (with ``auto_map`` and
``custom_pipelines``), ``generation_config.json``, ``model.safetensors``, the tokenizer files, the code files that
``trust_remote_code`` loading imports (the family's modeling/configuration files, their single-dot siblings and
``pipeline_seq2seq.py``) and, once written, the ``README.md`` model card. ``save_for_pipeline`` writes such a folder.

The card templates are ``model_cards/<family>.md`` at the top of the repository (the canonical copies, one per
family) and ship inside the package as ``encdec/model_cards/<family>.md`` (package data, byte-identical, which a
test enforces), so that an installed, non-editable encdec renders cards too. They are Jinja2 templates (Jinja2
comes with torch) rendered with ``StrictUndefined``: a misspelt placeholder fails instead of printing nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import torch
from huggingface_hub import CommitOperationAdd, EvalResult, HfApi, ModelCard, ModelCardData
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    Pipeline,
    PretrainedConfig,
    PreTrainedModel,
)

from . import __version__
from .errors import EncdecError, InputFileError, OverwriteError
from .io_utils import atomic_write_text
from .models.pipeline_seq2seq import Seq2SeqGenerationPipeline
from .tokenization import check_tokenizer_matches_model

PIPELINE_TASK = "seq2seq-generation"
FAMILIES = ("transformer_seq2seq", "rnn_seq2seq")
WEIGHTS_NAME = "model.safetensors"
REQUIRED_FILES = ("config.json", "generation_config.json", WEIGHTS_NAME, "tokenizer.json", "tokenizer_config.json")
OPTIONAL_FILES = ("special_tokens_map.json", "README.md")
_RESAVE_FIX = ("load the model and tokenizer and re-save them with `encdec.hub.save_for_pipeline(model, tokenizer, "
               "DIR)`")
_SIBLING_IMPORT = re.compile(r"^\s*from\s+\.(\w+)\s+import", flags=re.MULTILINE)


# --- the pipeline-ready folder -------------------------------------------------------------------------------------

def save_for_pipeline(model: PreTrainedModel, tokenizer, output_dir: str | os.PathLike) -> Path:
    """Save ``model`` and ``tokenizer`` through the ``seq2seq-generation`` pipeline: besides what
    ``save_pretrained`` writes, ``config.json`` gets ``custom_pipelines`` and ``pipeline_seq2seq.py`` is copied, so
    that ``pipeline(model=output_dir, trust_remote_code=True)`` works without encdec. Returns the folder."""
    check_tokenizer_matches_model(tokenizer, model.config)
    pipe = Seq2SeqGenerationPipeline(model=model, tokenizer=tokenizer, device=model.device, task=PIPELINE_TASK)
    pipe.save_pretrained(output_dir)
    return Path(output_dir)


def load_pipeline(model_dir: str | os.PathLike, device: int | str | torch.device | None = None
                  ) -> Seq2SeqGenerationPipeline:
    """The encdec pipeline over a saved folder, with this package's classes (no remote code is run)."""
    model_dir = _require_dir(model_dir)
    _read_json(model_dir / "config.json", "the model config")
    read_safetensors_shapes(model_dir / WEIGHTS_NAME)  # a clear error for missing or corrupt weights
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    check_tokenizer_matches_model(tokenizer, model.config)
    return Seq2SeqGenerationPipeline(model=model, tokenizer=tokenizer, device=device, task=PIPELINE_TASK)


def translate_lines(model_dir_or_pipeline: str | os.PathLike | Pipeline, lines: Iterable[str],
                    batch_size: int = 32, **generate_kwargs: Any) -> list[str]:
    """Translate each line; returns one string per line, in order (``encdec translate``).

    Blank lines give empty outputs without running the model, so the output file stays aligned with the input.
    Lines are batched longest first (less padding) and put back in order. ``generate_kwargs`` go to
    ``model.generate`` (``num_beams``, ``max_new_tokens``, ``do_sample``, ...).
    """
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise EncdecError("translate_lines returns one translation per line; leave `num_return_sequences` at 1.")
    if batch_size < 1:
        raise EncdecError(f"`batch_size` must be >= 1, got {batch_size}.")
    # a Pipeline: this package's, or the copy that `pipeline(model=..., trust_remote_code=True)` loads
    pipe = (model_dir_or_pipeline if isinstance(model_dir_or_pipeline, Pipeline)
            else load_pipeline(model_dir_or_pipeline))
    lines = [line.rstrip("\r\n") for line in lines]
    todo = sorted((i for i, line in enumerate(lines) if line.strip()), key=lambda i: -len(lines[i]))
    outputs = [""] * len(lines)
    if todo:
        results = pipe([lines[i] for i in todo], batch_size=batch_size, **generate_kwargs)
        for i, result in zip(todo, results, strict=True):
            outputs[i] = result["generated_text"]
    return outputs


# --- folder checks -------------------------------------------------------------------------------------------------

def _require_dir(model_dir: str | os.PathLike) -> Path:
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InputFileError(f"The model folder {model_dir} does not exist or is not a folder; check the path.")
    return model_dir


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise InputFileError(f"{path} ({what}) is missing; {_RESAVE_FIX}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputFileError(f"{path} ({what}) is not readable JSON ({err}); {_RESAVE_FIX}.") from err
    if not isinstance(data, dict):
        raise InputFileError(f"{path} ({what}) must hold a JSON object; {_RESAVE_FIX}.")
    return data


def read_safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Name -> shape of every tensor in a safetensors file; an ``InputFileError`` naming the file if it is missing,
    truncated or corrupt."""
    if not path.is_file():
        raise InputFileError(f"{path} (the model weights) is missing; {_RESAVE_FIX}.")
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {name: list(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except Exception as err:  # safetensors raises its own SafetensorError, or OSError
        raise InputFileError(f"{path} is not a readable safetensors file ({err}); it is corrupt or was cut short: "
                             f"{_RESAVE_FIX}.") from err
    if not shapes:
        raise InputFileError(f"{path} holds no tensors; {_RESAVE_FIX}.")
    return shapes


def _code_modules(config: Mapping[str, Any]) -> set[str]:
    """The module names that ``auto_map`` and ``custom_pipelines`` point at (``module.Class`` -> ``module``)."""
    refs: list[Any] = list(config.get("auto_map", {}).values())
    refs += [task.get("impl") for task in config.get("custom_pipelines", {}).values()]
    flat = [ref for item in refs for ref in (item if isinstance(item, (list, tuple)) else [item])]
    return {ref.rsplit(".", 1)[0] for ref in flat if isinstance(ref, str) and "--" not in ref}


def _code_files(model_dir: Path, modules: set[str]) -> set[str]:
    """The ``.py`` files of ``modules`` and everything they reach through single-dot sibling imports."""
    found: set[str] = set()
    todo = sorted(modules)
    while todo:
        name = f"{todo.pop()}.py"
        if name in found:
            continue
        path = model_dir / name
        if not path.is_file():
            raise InputFileError(f"{path} (code that `trust_remote_code` loading imports) is missing; {_RESAVE_FIX}.")
        found.add(name)
        todo += _SIBLING_IMPORT.findall(path.read_text(encoding="utf-8"))
    return found


def check_model_folder(model_dir: str | os.PathLike) -> list[str]:
    """Validate a model folder for the Hub and return the sorted names of the files that would be uploaded.

    Checks: ``config.json`` names an encdec family and has the ``auto_map`` entries and the ``seq2seq-generation``
    ``custom_pipelines`` entry that remote-code loading needs; ``model.safetensors`` opens with safetensors;
    ``generation_config.json`` and the tokenizer files parse; every code file those entries reach is present; a
    README.md, if any, has readable card metadata. Anything else in the folder (checkpoints, logs, plots) is not
    uploaded. Raises ``InputFileError``.
    """
    model_dir = _require_dir(model_dir)
    config = _read_json(model_dir / "config.json", "the model config")
    if config.get("model_type") not in FAMILIES:
        raise InputFileError(f"{model_dir / 'config.json'} has `model_type`={config.get('model_type')!r}; encdec "
                             f"ships the families {list(FAMILIES)}.")
    auto_map = config.get("auto_map", {})
    for auto_class in ("AutoConfig", "AutoModelForSeq2SeqLM"):
        if auto_class not in auto_map:
            raise InputFileError(f"{model_dir / 'config.json'} has no `auto_map` entry for {auto_class}, so "
                                 f"`trust_remote_code` loading cannot find the code; {_RESAVE_FIX} (with encdec "
                                 "imported, which registers the classes).")
    if PIPELINE_TASK not in config.get("custom_pipelines", {}):
        raise InputFileError(f"{model_dir / 'config.json'} has no `custom_pipelines` entry for {PIPELINE_TASK!r}, "
                             f"so `pipeline(model=..., trust_remote_code=True)` cannot find the task; {_RESAVE_FIX}.")
    read_safetensors_shapes(model_dir / WEIGHTS_NAME)
    _read_json(model_dir / "generation_config.json", "the generation defaults")
    _read_json(model_dir / "tokenizer.json", "the tokenizer")
    _read_json(model_dir / "tokenizer_config.json", "the tokenizer settings")
    files = set(REQUIRED_FILES) | _code_files(model_dir, _code_modules(config))
    files |= {name for name in OPTIONAL_FILES if (model_dir / name).is_file()}
    if "README.md" in files:
        try:
            ModelCard.load(model_dir / "README.md")
        except Exception as err:  # a broken metadata block: ValueError or a YAML error
            raise InputFileError(f"{model_dir / 'README.md'} (the model card) has an unreadable metadata block "
                                 f"({err}); fix it, or rewrite it with `write_model_card(..., overwrite=True)`."
                                 ) from err
    return sorted(files)


# --- model card ----------------------------------------------------------------------------------------------------

def card_template(family: str) -> str:
    """The Jinja2 model-card template of ``family``, read from the package data."""
    if family not in FAMILIES:
        raise EncdecError(f"No model card template for family {family!r}; choose one of {list(FAMILIES)}.")
    return (resources.files("encdec") / "model_cards" / f"{family}.md").read_text(encoding="utf-8")


def _config_and_size(model_dir_or_model: str | os.PathLike | PreTrainedModel) -> tuple[PretrainedConfig, int, str]:
    """(config, parameter count, default model name) of a model object or a saved folder (read without loading the
    weights: tied tensors are stored once, as ``num_parameters()`` counts them once)."""
    if isinstance(model_dir_or_model, PreTrainedModel):
        return model_dir_or_model.config, model_dir_or_model.num_parameters(), model_dir_or_model.config.model_type
    model_dir = _require_dir(model_dir_or_model)
    _read_json(model_dir / "config.json", "the model config")
    config = AutoConfig.from_pretrained(model_dir)
    shapes = read_safetensors_shapes(model_dir / WEIGHTS_NAME)
    return config, sum(math.prod(shape) for shape in shapes.values()), model_dir.resolve().name


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


def render_model_card(
    model_dir_or_model: str | os.PathLike | PreTrainedModel,
    *,
    family: str | None = None,
    dataset_name: str | None = None,
    dataset_id: str | None = None,
    metrics: Mapping[str, Any] | None = None,
    training_summary: Mapping[str, Any] | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",  # noqa: A002  (the Hub's metadata key)
) -> str:
    """The README.md model card of a model (object or saved folder) from its family's template.

    :param family: ``transformer_seq2seq`` or ``rnn_seq2seq``; default: the config's ``model_type`` (must agree)
    :param dataset_name: human-readable name of the training/evaluation data
    :param dataset_id: its Hub dataset id, if it has one (goes into ``datasets`` and the model-index)
    :param metrics: ``{"bleu": float, "chrf": float, "bleu_signature": str, "chrf_signature": str,
        "split": str}``, optionally ``"bleu_lowercase"`` and ``"num_beams"`` (other keys are ignored); the scores
        go into the ``model-index`` as a translation result
    :param training_summary: free-form ``{label: value}`` rows (steps, epochs, hardware, wall time, ...)
    :param repo_id: the Hub id used in the usage snippet and as the model name
    """
    config, num_parameters, default_name = _config_and_size(model_dir_or_model)
    family = family or config.model_type
    if family != config.model_type:
        raise EncdecError(f"`family`={family!r} does not match the model's `model_type`={config.model_type!r}; "
                          "leave `family` unset to use the model's.")
    template = card_template(family)
    scores = {key: round(float(metrics[key]), 2) for key in ("bleu", "bleu_lowercase", "chrf")
              if (metrics or {}).get(key) is not None}
    metrics = {**metrics, **scores} if scores else None  # without BLEU or chrF, the card says "not evaluated"
    summary = {key: f"{value:.4g}" if isinstance(value, float) else value
               for key, value in (training_summary or {}).items()}
    dataset_name = dataset_name or dataset_id
    if metrics and not dataset_name:
        raise EncdecError("`metrics` need the data they were measured on: pass `dataset_name` (or `dataset_id`).")
    model_name = repo_id.split("/")[-1] if repo_id else default_name
    card_data = ModelCardData(
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "seq2seq", "encdec", family],
        datasets=[dataset_id] if dataset_id else None,
        metrics=sorted({key.split("_")[0] for key in scores}) or None,  # Hub metric ids: bleu, chrf
        model_name=model_name,
        eval_results=_eval_results(metrics, dataset_name, dataset_id or _slug(dataset_name)) if metrics else None,
    )
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                     trim_blocks=True, lstrip_blocks=True, autoescape=False)
    text = environment.from_string(template).render(
        card_data=card_data.to_yaml(),
        model_name=model_name,
        model_id=repo_id or "PATH_OR_REPO_ID",
        family=family,
        config=config,
        num_parameters=f"{num_parameters:,} ({_human(num_parameters)})",
        dataset_name=dataset_name,
        dataset_id=dataset_id,
        metrics=metrics,
        training_summary=summary or None,
        encdec_version=__version__,
        pipeline_task=PIPELINE_TASK,
    )
    ModelCard(text)  # parses the metadata block: a broken template fails here, not on the Hub
    return text


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "custom"


def write_model_card(model_dir: str | os.PathLike, *, overwrite: bool = False, **card_kwargs: Any) -> Path:
    """Render the card of the model saved in ``model_dir`` and write it to ``model_dir/README.md`` atomically.
    ``card_kwargs`` are those of ``render_model_card``. An existing README.md is replaced only with ``overwrite``."""
    path = _require_dir(model_dir) / "README.md"
    if path.exists() and not overwrite:
        raise OverwriteError(f"{path} already exists; pass overwrite=True (--overwrite) to replace it.")
    atomic_write_text(path, render_model_card(model_dir, **card_kwargs))
    return path


def record_scores_in_card(model_dir: str | os.PathLike, results: Mapping[str, Any], dataset_name: str, split: str,
                          dataset_id: str | None = None) -> Path:
    """Rewrite the model card of ``model_dir`` with the scores of ``encdec evaluate`` (``results``) in its text and
    ``model-index``, keeping the training rows that ``encdec train`` recorded in ``eval_results.json``."""
    model_dir = _require_dir(model_dir)
    recorded = model_dir / "eval_results.json"
    train = _read_json(recorded, "the training results").get("train", {}) if recorded.is_file() else {}
    from .training import training_summary  # lazy: it imports the Trainer

    return write_model_card(model_dir, overwrite=True, metrics={**results, "split": split},
                            dataset_name=dataset_name, dataset_id=dataset_id,
                            training_summary=training_summary(train) if train else None)


# --- push ----------------------------------------------------------------------------------------------------------

def push_model(model_dir: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None,
               commit_message: str = "Upload encdec model") -> str:
    """Push a checked model folder to the Hub in one commit; returns the commit URL.

    The folder is checked (``check_model_folder``) and loaded through the Auto classes (model and tokenizer must
    agree); a README.md card is written first if there is none. Then ``HfApi.create_repo`` and one
    ``HfApi.create_commit`` upload exactly the checked files, from the folder as they are. (``model.push_to_hub``
    would re-serialise without ``pipeline_seq2seq.py`` and replace README.md with a default card, in separate
    commits.)
    """
    model_dir = _require_dir(model_dir)
    check_model_folder(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    check_tokenizer_matches_model(tokenizer, model.config)
    if not (model_dir / "README.md").exists():
        write_model_card(model_dir, repo_id=repo_id)
    files = check_model_folder(model_dir)
    api = HfApi(token=token, library_name="encdec", library_version=__version__)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(model_dir / name)) for name in files]
    commit = api.create_commit(repo_id=repo_id, operations=operations, commit_message=commit_message)
    return commit.commit_url


__all__ = [
    "FAMILIES",
    "PIPELINE_TASK",
    "card_template",
    "check_model_folder",
    "load_pipeline",
    "push_model",
    "read_safetensors_shapes",
    "render_model_card",
    "save_for_pipeline",
    "translate_lines",
    "write_model_card",
]
