"""Model folders: what a folder holds, whether two folders hold the same model, checks that name the broken file,
and saving one.

A model folder (torch, or a backend's export: ``encdec.backends``) is made of the files that decide its translations
(``MODEL_FILES``, the weights, the files each backend declares: ``decides_translations``), the records that encdec
writes beside them about the model (``RECORD_FILES``: scores, averaging record, card) and the code that
``trust_remote_code`` loading imports. Two
folders hold the same model when their ``model_identity`` is equal: a resumed corpus run and a distillation's
teacher ask this, and a new file written beside the model (``encdec evaluate --output runs/m/test.json``) does not
change the answer; ``refuse_model_overwrite`` keeps outputs off every file of the model.

A shippable folder holds exactly what ``check_model_folder`` lists: ``config.json`` (with ``auto_map`` and
``custom_pipelines``), ``generation_config.json``, ``model.safetensors``, the tokenizer files, the code files that
``trust_remote_code`` loading imports (the family's modeling/configuration files, their single-dot siblings,
``pipeline_seq2seq.py`` and, for a multilingual model, ``tokenization_multilingual.py``) and, once written, the
``README.md`` model card. ``save_for_pipeline`` writes such a folder.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard
from safetensors import safe_open
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

from .backends import BACKENDS, DEFAULT_ENGINE, export_kind, marker_files
from .errors import InputFileError, OverwriteError
from .io_utils import file_sha256, refuse_overlap
from .models.pipeline_seq2seq import Seq2SeqGenerationPipeline
from .tokenization import TOKENIZER_FILES, check_tokenizer_matches_model

PIPELINE_TASK = "seq2seq-generation"
FAMILIES = ("transformer_seq2seq", "rnn_seq2seq")
WEIGHTS_NAME = "model.safetensors"
ALIGNMENT_FILE = "alignment.json"  # the alignment layer chosen for a model (encdec.inference.alignment)
REQUIRED_FILES = ("config.json", "generation_config.json", WEIGHTS_NAME, "tokenizer.json", "tokenizer_config.json")
# target_tokenizer.json: the target side of an imported Marian model's tokenizer, when it differs from the source's
OPTIONAL_FILES = ("special_tokens_map.json", "README.md", "target_tokenizer.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin")  # torch weights (a backend's own weight files: its ``model_files``)
# the files that decide what a model folder translates (with its weights and the files each backend declares), the
# export records of the backends among them
MODEL_FILES = frozenset({"config.json", "generation_config.json", "special_tokens_map.json", "added_tokens.json",
                         *TOKENIZER_FILES, *marker_files(), ALIGNMENT_FILE})
# what encdec writes beside a model about it: scores (`encdec train`), the averaging record, the model card
RECORD_FILES = frozenset({"eval_results.json", "averaging.json", "README.md"})
RESAVE_FIX = ("load the model and tokenizer and re-save them with `encdec.folders.save_for_pipeline(model, "
              "tokenizer, DIR)`")
_SIBLING_IMPORT = re.compile(r"^\s*from\s+\.(\w+)\s+import", flags=re.MULTILINE)


def save_for_pipeline(model: PreTrainedModel, tokenizer, output_dir: str | os.PathLike) -> Path:
    """Save ``model`` and ``tokenizer`` through the ``seq2seq-generation`` pipeline: besides what
    ``save_pretrained`` writes, ``config.json`` gets ``custom_pipelines`` and ``pipeline_seq2seq.py`` is copied, so
    that ``pipeline(model=output_dir, trust_remote_code=True)`` works without encdec. Returns the folder."""
    check_tokenizer_matches_model(tokenizer, model.config)
    pipe = Seq2SeqGenerationPipeline(model=model, tokenizer=tokenizer, device=model.device, task=PIPELINE_TASK)
    pipe.save_pretrained(output_dir)
    return Path(output_dir)


def require_dir(model_dir: str | os.PathLike) -> Path:
    """``model_dir`` as a Path; an ``InputFileError`` naming it if it is not a folder."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InputFileError(f"The model folder {model_dir} does not exist or is not a folder; check the path.")
    return model_dir


def model_folders_in(folder: Path) -> list[Path]:
    """The model folders (torch, or an export) directly inside ``folder``, sorted."""
    markers = ("config.json", *marker_files())
    return sorted(child for child in folder.iterdir()
                  if child.is_dir() and any((child / name).is_file() for name in markers))


def decides_translations(name: str) -> bool:
    """Whether the file ``name`` of a model folder decides what the model translates: its configs, tokenizer,
    weights, export record, the files its backend declares (``Backend.model_files``: graphs, vocabularies) and
    recorded alignment layer; not the ``RECORD_FILES`` written about it, the code that remote-code loading imports, nor
    a file that someone put beside them."""
    return (name in MODEL_FILES or name in marker_files() or Path(name).suffix in (*WEIGHT_SUFFIXES, ".model")
            or any(fnmatch.fnmatch(name, pattern) for spec in BACKENDS.values() for pattern in spec.model_files))


def model_identity(model_dir: str | os.PathLike) -> dict[str, str]:
    """The one answer to "is this the same model?": the folder's resolved path and the SHA-256 of each of its files
    that ``decides_translations``, by name. Two folders (or one folder at two times) hold the same model when their
    identities are equal; the first name whose hash differs says what changed. Scores, cards and other files written
    beside the model leave it unchanged."""
    folder = Path(model_dir)
    identity = {"path": str(folder.resolve())}
    for path in sorted(folder.iterdir()):
        if path.is_file() and decides_translations(path.name):
            identity[path.name] = file_sha256(path)
    return identity


def refuse_model_overwrite(output: str | os.PathLike, model_dirs: Sequence[str | os.PathLike],
                           option: str = "--output") -> None:
    """An output file may lie in a model folder (``encdec evaluate --output runs/m/test2016-beam5.json`` keeps the
    scores with their model), but may not be the folder, contain it, lie in a subfolder of it, or be one of its
    files: those that decide its translations, its records and its code; an ``OverwriteError`` naming both
    otherwise."""
    target = Path(output).resolve()
    for folder in map(Path, model_dirs):
        folder = folder.resolve()
        if target == folder or target in folder.parents:
            refuse_overlap(output, [folder], option)
        if folder in target.parents and (target.parent != folder or decides_translations(target.name)
                                         or target.name in RECORD_FILES or target.suffix == ".py"):
            raise OverwriteError(f"{option} {output} is part of the model {folder}; writing there would destroy "
                                 f"it. Choose another {option} path (a new file beside its files is fine).")


def family_of(model_dir: Path) -> str | None:
    """The encdec family a torch model folder's config.json names (``transformer_seq2seq``, ``rnn_seq2seq``), or
    None when there is no readable config."""
    try:
        return json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None


def require_model_folder(model_dir: str | os.PathLike, engine: str = DEFAULT_ENGINE) -> Path:
    """``model_dir`` as a Path, once it is the kind of folder ``engine`` reads: a model folder for an engine without
    an export of its own (torch), else a folder that its backend's export wrote (``encdec.backends``: the file that
    marks it). Otherwise an ``InputFileError`` that says what the folder is and the flag or path that works (an export
    given to the torch engine, a torch folder given to an export's engine, a folder of model folders, a folder with no
    model)."""
    model_dir = require_dir(model_dir)
    kind = export_kind(model_dir)
    has_config = (model_dir / "config.json").is_file()
    if kind is None and not has_config:
        refuse_folder_of_models(model_dir, engine)
    reads_export = reads_an_export(engine)
    if reads_export and kind != engine:
        raise InputFileError(not_an_export(model_dir, engine, kind))
    if not reads_export and kind is not None:
        exported = BACKENDS[kind]
        source = exported.source_of(read_json(model_dir / exported.marker, "the export record")) or "MODEL_DIR"
        raise InputFileError(f"{model_dir} is {exported.folder_name} export (written by `encdec export`): translate it "
                             f"with `--engine {kind}`, or give the {engine} engine the model folder it came from "
                             f"({source}).")
    if kind is None and not has_config and not (model_dir / WEIGHTS_NAME).is_file():
        raise InputFileError(f"{model_dir} is not a model folder (it has no config.json and no {WEIGHTS_NAME}); "
                             "pass the folder that `encdec train` wrote (its `training.output_dir`).")
    return model_dir


def reads_an_export(engine: str) -> bool:
    """Whether ``engine`` reads a folder of its backend's export (one with a marker file), not a model folder."""
    return engine in BACKENDS and BACKENDS[engine].marker is not None


def refuse_folder_of_models(folder: Path, engine: str) -> None:
    """An ``InputFileError`` naming the model folders inside ``folder``, if it holds some, with one that fits
    ``engine`` as the example."""
    inside = model_folders_in(folder)
    if not inside:
        return
    fitting = [path for path in inside if export_kind(path) == (engine if reads_an_export(engine) else None)]
    fitting = fitting or inside
    names = ", ".join(str(path) for path in inside[:5]) + (", ..." if len(inside) > 5 else "")
    raise InputFileError(f"{folder} holds model folders, not a model: {names}; pass one of them, e.g. "
                         f"`--model {fitting[0]}`.")


def not_an_export(model_dir: Path, engine: str, kind: str | None) -> str:
    """Why ``model_dir`` cannot go to ``engine`` (one that reads its backend's export), and the command that works."""
    wanted = BACKENDS[engine]
    what = wanted.folder_name
    if kind is not None:
        return (f"{model_dir} is {BACKENDS[kind].folder_name} export, not {what} one: translate it with "
                f"`--engine {kind}`.")
    has_config = (model_dir / "config.json").is_file()
    family = family_of(model_dir) if has_config else None
    if family is not None and wanted.families is not None and family not in wanted.families:
        return (wanted.refusal or "{model_dir} holds a " + family + " model, which the " + engine + " engine does "
                "not decode: translate it with `--engine " + DEFAULT_ENGINE + "`.").format(model_dir=model_dir)
    export = f"`encdec export --model {model_dir} --format {wanted.export_format}"
    if has_config:
        output = model_dir.parent / f"{model_dir.name}-{wanted.output_suffix}"
        if export_kind(output) == engine:
            return (f"{model_dir} is a torch model folder, not {what} export; its export is {output}: pass "
                    f"`--model {output}`.")
        return (f"{model_dir} is a torch model folder, not {what} export: export it first with {export} --output "
                f"{output}`, then pass `--model {output}`.")
    return (f"{model_dir} is not {what} export of encdec (it has no {wanted.marker}): export a model folder with "
            f"`encdec export --model MODEL_DIR --format {wanted.export_format} --output NEW_DIR` and pass NEW_DIR.")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``; an ``InputFileError`` naming the file (``what`` it is) and the fix otherwise."""
    if not path.is_file():
        raise InputFileError(f"{path} ({what}) is missing; {RESAVE_FIX}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputFileError(f"{path} ({what}) is not readable JSON ({err}); {RESAVE_FIX}.") from err
    if not isinstance(data, dict):
        raise InputFileError(f"{path} ({what}) must hold a JSON object; {RESAVE_FIX}.")
    return data


def read_safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Name -> shape of every tensor in a safetensors file; an ``InputFileError`` naming the file if it is missing,
    truncated or corrupt."""
    if not path.is_file():
        raise InputFileError(f"{path} (the model weights) is missing; {RESAVE_FIX}.")
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {name: list(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except Exception as err:  # safetensors raises its own SafetensorError, or OSError
        raise InputFileError(f"{path} is not a readable safetensors file ({err}); it is corrupt or was cut short: "
                             f"{RESAVE_FIX}.") from err
    if not shapes:
        raise InputFileError(f"{path} holds no tensors; {RESAVE_FIX}.")
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
            raise InputFileError(f"{path} (code that `trust_remote_code` loading imports) is missing; {RESAVE_FIX}.")
        found.add(name)
        todo += _SIBLING_IMPORT.findall(path.read_text(encoding="utf-8"))
    return found


def check_model_folder(model_dir: str | os.PathLike) -> list[str]:
    """Validate a model folder for the Hub and return the sorted names of the files that would be uploaded.

    Checks: ``config.json`` names an encdec family and has the ``auto_map`` entries and the ``seq2seq-generation``
    ``custom_pipelines`` entry that remote-code loading needs; ``model.safetensors`` opens with safetensors;
    ``generation_config.json`` and the tokenizer files parse; every code file those entries (and the ``auto_map`` of
``tokenizer_config.json``, for a multilingual tokenizer's class) reach is present; a
    README.md, if any, has readable card metadata. Anything else in the folder (checkpoints, logs, plots) is not
    uploaded. Raises ``InputFileError``.
    """
    model_dir = require_dir(model_dir)
    config = read_json(model_dir / "config.json", "the model config")
    if config.get("model_type") not in FAMILIES:
        raise InputFileError(f"{model_dir / 'config.json'} has `model_type`={config.get('model_type')!r}; encdec "
                             f"ships the families {list(FAMILIES)}.")
    auto_map = config.get("auto_map", {})
    for auto_class in ("AutoConfig", "AutoModelForSeq2SeqLM"):
        if auto_class not in auto_map:
            raise InputFileError(f"{model_dir / 'config.json'} has no `auto_map` entry for {auto_class}, so "
                                 f"`trust_remote_code` loading cannot find the code; {RESAVE_FIX} (with encdec "
                                 "imported, which registers the classes).")
    if PIPELINE_TASK not in config.get("custom_pipelines", {}):
        raise InputFileError(f"{model_dir / 'config.json'} has no `custom_pipelines` entry for {PIPELINE_TASK!r}, "
                             f"so `pipeline(model=..., trust_remote_code=True)` cannot find the task; {RESAVE_FIX}.")
    read_safetensors_shapes(model_dir / WEIGHTS_NAME)
    read_json(model_dir / "generation_config.json", "the generation defaults")
    read_json(model_dir / "tokenizer.json", "the tokenizer")
    tokenizer_config = read_json(model_dir / "tokenizer_config.json", "the tokenizer settings")
    # a multilingual tokenizer's class is code too (tokenizer_config.json's auto_map)
    files = set(REQUIRED_FILES) | _code_files(model_dir, _code_modules(config) | _code_modules(tokenizer_config))
    files |= {name for name in OPTIONAL_FILES if (model_dir / name).is_file()}
    if "README.md" in files:
        try:
            ModelCard.load(model_dir / "README.md")
        except Exception as err:  # a broken metadata block: ValueError or a YAML error
            raise InputFileError(f"{model_dir / 'README.md'} (the model card) has an unreadable metadata block "
                                 f"({err}); fix it, or rewrite it with `write_model_card(..., overwrite=True)`."
                                 ) from err
    return sorted(files)


def config_and_size(model_dir_or_model: str | os.PathLike | PreTrainedModel) -> tuple[PretrainedConfig, int, str]:
    """(config, parameter count, default model name) of a model object or a saved folder (read without loading the
    weights: tied tensors are stored once, as ``num_parameters()`` counts them once)."""
    if isinstance(model_dir_or_model, PreTrainedModel):
        return model_dir_or_model.config, model_dir_or_model.num_parameters(), model_dir_or_model.config.model_type
    model_dir = require_dir(model_dir_or_model)
    read_json(model_dir / "config.json", "the model config")
    config = AutoConfig.from_pretrained(model_dir)
    shapes = read_safetensors_shapes(model_dir / WEIGHTS_NAME)
    return config, sum(math.prod(shape) for shape in shapes.values()), model_dir.resolve().name


__all__ = ["FAMILIES", "MODEL_FILES", "PIPELINE_TASK", "RECORD_FILES", "WEIGHTS_NAME", "WEIGHT_SUFFIXES",
           "check_model_folder", "config_and_size", "decides_translations", "family_of", "model_identity", "read_json",
           "read_safetensors_shapes", "refuse_model_overwrite", "require_dir", "require_model_folder",
           "save_for_pipeline"]
