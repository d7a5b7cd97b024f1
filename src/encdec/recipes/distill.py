"""``encdec distill``: sequence-level knowledge distillation of a teacher (one model or an ensemble) into a student.

Kim and Rush (2016), "Sequence-Level Knowledge Distillation" (EMNLP): the teacher translates the training sources
with beam search, and the student is trained on those translations instead of (or beside) the references. A student
learns the teacher's one mode of each distribution instead of the spread of human references, which is easier; it is
how the small fast CPU models of Marian and Bergamot are made. The workflow runs in four stages, each resumable and
none redone once finished:

1. **sources**: the student's splits (from its run config's ``data`` section, any format) are written as aligned
   text files in ``<output_dir>/corpus``: ``original.{src,tgt}`` (the training split) and ``validation`` /
   ``test`` as they are;
2. **translation**: the teacher translates ``original.src`` with ``encdec translate``'s corpus path
   (``encdec.inference.corpus.translate_file``: streamed in chunks, resumable after ``kill -9``, shared out over the
   processes of ``accelerate launch``), each line with the teacher's log-probability: ``teacher.scored``;
3. **corpus**: ``train.{src,tgt}``, the distilled pairs. A pair whose translation is empty, or whose log-probability
   per token is below ``min_score``, is dropped; with ``mix_original`` the original pairs follow the distilled ones
   (the teacher's and the human targets side by side, as in Kim and Rush's and later students);
4. **student**: ``encdec train`` of the student's run config on that folder, into ``<output_dir>/student``, resumed
   from its latest checkpoint after an interruption. Its model card says which teacher it was distilled from.

The corpus goes to ``corpus_dir`` when the recipe names one: several students of one teacher then share a single
translation of the sources (run the first to the end of its translation before starting the others).
``<output_dir>/corpus/manifest.json`` records what the corpus was made from: the teacher folders and the SHA-256 of
their files, the decoding options, the student's data, the filter and mix options, and each stage's line counts.
Running again with a recipe that differs in any of these is refused, naming the difference.

A multilingual teacher teaches a bilingual student the direction of ``teacher.source_lang`` and
``teacher.target_lang``, or a multilingual student (its ``data`` names ``languages``, ``directions`` or
``pair_dirs``) every direction of that student's data: the stages then run a direction at a time over files in
fairseq's naming (``original.de-en.de``, ``teacher.de-en.scored``, ``train.de-en.{de,en}``), each direction's
translation recorded in the manifest as it finishes, and the student reads the direction files with its data's
sampling temperature.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..chunked import ChunkFile, difference
from ..config_io import apply_overrides, from_dict, load_yaml
from ..data import DataSpec, load_data, write_aligned_splits
from ..data.directions import Direction, direction_name, parse_directions, split_by_direction
from ..decoding_options import TEACHER, asked_of, check_languages, declared, in_words
from ..errors import EncdecError
from ..folders import model_identity
from ..inference import CHUNK_SIZE
from ..inference.corpus import TranslationOutput, translate_file
from ..inference.engines import DEFAULT_ENGINE
from ..inference.ensemble import check_same_tokenizer, tokenizer_difference
from ..io_utils import WriterLock, atomic_output, atomic_write_json, batched, require_file
from ..processes import Shard, is_main_process, on_main, process_state, rank_and_world
from ..tokenization import language_ids, load_tokenizer
from ..training import RunConfig, load_run_config, train

logger = logging.getLogger(__name__)

MANIFEST_VERSION = 1
CORPUS_SUBDIR, STUDENT_SUBDIR = "corpus", "student"
SCORED = "teacher.scored"  # the teacher's output: "TRANSLATION ||| LOG-PROBABILITY" a line


class TeacherChecks:
    """The checks of the ``teacher`` section (``TeacherSettings``)."""

    def __post_init__(self) -> None:
        if not self.models:
            raise EncdecError("teacher.models is empty: name one model folder, or several for an ensemble.")
        if self.batch_size < 1:
            raise EncdecError(f"teacher.batch_size must be at least 1, got {self.batch_size}.")


# The ``teacher`` section: the model(s) that translate (one model folder, or several: an ensemble, the mean of their
# log-probabilities each step) and how they decode: each decoding option a teacher takes (``decoding_options``,
# ``None``: the first model's generation config), the sentences per generate() call, the engine (``--engine``'s: one
# that reads an export takes the folder `encdec export` wrote) and its quantization (``--quantize``'s).
TeacherSettings = dataclasses.make_dataclass("TeacherSettings", [
    ("models", list[str]),
    *[(item.name, item.metadata["kind"] | None, field(default=None)) for item in declared(TEACHER)],
    ("batch_size", int, field(default=32)), ("engine", str, field(default=DEFAULT_ENGINE)),
    ("quantize", str | None, field(default=None))], bases=(TeacherChecks,))
TeacherSettings.__module__ = __name__


@dataclass
class DistillConfig:
    """A distillation recipe (YAML). Input paths (``teacher.models``, ``student``) are relative to the YAML's
    folder; ``output_dir`` is relative to the current folder, as ``training.output_dir`` is."""

    teacher: TeacherSettings
    student: str  # the student's run config (YAML): its model, tokenizer, training settings and data
    output_dir: str  # corpus/ (the distilled corpus and its manifest) and student/ (the model) go here
    student_overrides: list[str] = field(default_factory=list)  # `--section.key value` items for the student config
    mix_original: bool = False  # train on the distilled pairs and the original ones
    min_score: float | None = None  # drop pairs whose teacher log-probability per token is below this (e.g. -1.5)
    chunk_size: int = CHUNK_SIZE  # lines the teacher translates between two resumable saves
    corpus_dir: str | None = None  # the distilled corpus; null: <output_dir>/corpus. Students of one teacher on one
    #                                data can share one (the manifest must match): the teacher translates once

    @property
    def corpus(self) -> Path:
        return Path(self.corpus_dir) if self.corpus_dir else Path(self.output_dir) / CORPUS_SUBDIR

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise EncdecError(f"chunk_size must be at least 1, got {self.chunk_size}.")
        if self.min_score is not None and (math.isnan(self.min_score) or self.min_score > 0):
            raise EncdecError(f"min_score is a log-probability per token, so at most 0; got {self.min_score}.")


def load_distill_config(path: str | Path, overrides: list[str] | None = None) -> DistillConfig:
    """Read a distillation recipe, apply ``--key value`` overrides (``--teacher.batch_size 64``), check every key."""
    data = load_yaml(path)
    base = Path(path).resolve().parent
    teacher = data.get("teacher")
    if isinstance(teacher, dict) and isinstance(teacher.get("models"), str):
        teacher["models"] = [teacher["models"]]
    if isinstance(teacher, dict) and isinstance(teacher.get("models"), list):
        teacher["models"] = [_anchored(base, model) for model in teacher["models"]]
    if isinstance(data.get("student"), str):
        data["student"] = _anchored(base, data["student"])
    return from_dict(DistillConfig, apply_overrides(data, overrides or []), where="distill")


def _anchored(base: Path, value: Any) -> Any:
    return value if not isinstance(value, str) or Path(value).is_absolute() else str(base / value)


# --- what the corpus is made from --------------------------------------------------------------------------------

def recipe_record(config: DistillConfig, student: RunConfig) -> dict[str, Any]:
    """What decides the distilled corpus: compared with the manifest's on every rerun. A teacher is each folder's
    ``encdec.folders.model_identity``: scores and cards written beside it later leave the corpus valid."""
    decoding = dataclasses.asdict(config.teacher)
    decoding.pop("models")
    data = dataclasses.asdict(student.data)
    for key in ("num_proc", "cache_dir"):  # how, not what
        data.pop(key)
    return {"teacher": [model_identity(model) for model in config.teacher.models], "decoding": decoding,
            "data": data, "mix_original": config.mix_original, "min_score": config.min_score,
            "chunk_size": config.chunk_size}


def check_manifest(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """The manifest to go on with: a new one, or the existing one if it was made from the same ``record``."""
    if not path.is_file():
        return {"version": MANIFEST_VERSION, "recipe": record, "stages": {}}
    manifest = read_manifest(path)
    found = difference(manifest.get("recipe"), record)
    if manifest.get("version") != MANIFEST_VERSION:
        found = f"manifest version {manifest.get('version')} before, {MANIFEST_VERSION} now"
    if found:
        raise EncdecError(f"The distilled corpus in {path.parent} was made from a different recipe ({found}); use "
                          f"another output_dir, or delete {path.parent} to start over.")
    return manifest


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EncdecError(f"{path} (the distillation manifest) is not readable JSON ({err}); delete {path.parent} "
                          "to start over.") from err
    if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), dict):
        raise EncdecError(f"{path} is not a distillation manifest; delete {path.parent} to start over.")
    return manifest


def check_tokenizers(config: DistillConfig, student: RunConfig) -> Any:
    """The teacher's tokenizer; teachers must share one (as an ensemble must), and a student given a tokenizer must
    be given the teacher's. A multilingual teacher translates in the direction ``teacher.source_lang`` ->
    ``teacher.target_lang`` (checked here, before any stage: ``decoding_options.check_languages``), which its
    tokenizer is set to (the scores per token count the target language's token, as the teacher's scores do). A
    multilingual student (``data.languages``, ``directions`` or ``pair_dirs``) takes its directions from its data
    instead (``check_multilingual_teacher``)."""
    tokenizers = [load_tokenizer(model) for model in config.teacher.models]
    check_same_tokenizer(tokenizers, config.teacher.models)
    teacher = config.teacher
    if student.data.multilingual:
        check_multilingual_teacher(config, tokenizers[0])
    elif check_languages(teacher.source_lang, teacher.target_lang, language_ids(tokenizers[0])) is not None:
        tokenizers[0].src_lang, tokenizers[0].tgt_lang = teacher.source_lang, teacher.target_lang
    if student.tokenizer.path:
        found = tokenizer_difference(tokenizers[0], load_tokenizer(student.tokenizer.path))
        if found:
            raise EncdecError(f"The student's tokenizer.path ({student.tokenizer.path}) is not the teacher's "
                              f"({config.teacher.models[0]}): {found}. Give it the teacher's folder, or set it to "
                              "null so that the student trains its own on the distilled corpus.")
    elif is_main_process():
        logger.warning("the student trains its own tokenizer on the distilled corpus (tokenizer.path is null)")
    return tokenizers[0]


# --- the stages ----------------------------------------------------------------------------------------------------

def languages(data: DataSpec) -> tuple[str, str]:
    """The corpus files' suffixes: the student's languages where its data names them, else ``source`` and
    ``target`` (no language code, so the student's model card claims no languages)."""
    return data.source_lang or "source", data.target_lang or "target"


def write_sources(student: RunConfig, corpus: Path) -> dict[str, int]:
    """Stage 1: every split of the student's data as aligned text files (``original`` for the training split),
    streamed from the ``datasets`` cache; returns the line counts."""
    counts = write_aligned_splits(load_data(student.data), corpus, languages(student.data), names={"train": "original"})
    if not counts.get("train"):
        raise EncdecError("The student's data has no training pairs to distil (its `data` section gives no train "
                          "split, or an empty one).")
    return counts


def scored_file(corpus: Path, direction: Direction | None = None) -> Path:
    """The teacher's output file: ``teacher.scored``, or one a direction (``teacher.de-en.scored``)."""
    return corpus / (SCORED if direction is None else f"teacher.{direction_name(direction)}.scored")


def stem(direction: Direction | None) -> str:
    """What a direction adds to its files' names: ``original.de-en.de`` where a bilingual corpus has
    ``original.de``."""
    return "" if direction is None else f".{direction_name(direction)}"


def translate_sources(config: DistillConfig, corpus: Path, src: str, direction: Direction | None = None) -> None:
    """Stage 2: the teacher's translation of ``original.src`` (of ``original.SRC-TGT.SRC`` into TGT for a
    ``direction``), each line with its log-probability, resumable."""
    output = scored_file(corpus, direction)
    options = asked_of(config.teacher, TEACHER)
    if direction is not None:
        options |= {"source_lang": direction[0], "target_lang": direction[1]}
    resume = ChunkFile.interrupted(output)
    translate_file(config.teacher.models, str(corpus / f"original{stem(direction)}.{src}"), str(output),
                   form=TranslationOutput(scores=True), chunk_size=config.chunk_size, resume=resume,
                   engine=config.teacher.engine, quantize=config.teacher.quantize,
                   batch_size=config.teacher.batch_size, **options)


def scored_lines(path: Path) -> Iterator[tuple[str, float | None]]:
    """``teacher.scored``'s (translation, log-probability) pairs; a blank source's line has no score."""
    with open(path, encoding="utf-8", newline="") as f:  # only \n ends a line: a \r stays in its translation
        for line in f:
            text, _, score = line.removesuffix("\n").rpartition(" ||| ")
            yield text, float(score) if score else None


def build_corpus(config: DistillConfig, corpus: Path, tokenizer: Any, src: str, tgt: str,
                 direction: Direction | None = None) -> dict[str, int]:
    """Stage 3: ``train.src`` / ``train.tgt`` (``train.SRC-TGT.*`` for a ``direction``) from the teacher's
    translations (filtered), then, with ``mix_original``, the original pairs; returns the counts."""
    counts = {"translated": 0, "empty": 0, "below_min_score": 0, "distilled": 0, "original": 0}
    name, original = f"train{stem(direction)}", f"original{stem(direction)}"
    with atomic_output(corpus / f"{name}.{src}") as s, atomic_output(corpus / f"{name}.{tgt}") as t, \
            open(s, "w", encoding="utf-8") as source_file, open(t, "w", encoding="utf-8") as target_file:
        pairs = zip(_lines(corpus / f"{original}.{src}"), scored_lines(scored_file(corpus, direction)), strict=True)
        for batch in batched(pairs, 1000):
            for (source, (text, _)), per_token in zip(batch, _per_token(tokenizer, batch), strict=True):
                counts["translated"] += 1
                if not text.strip() or per_token is None:
                    counts["empty"] += 1
                elif config.min_score is not None and per_token < config.min_score:
                    counts["below_min_score"] += 1
                else:
                    source_file.write(source + "\n")
                    target_file.write(text + "\n")
                    counts["distilled"] += 1
        if config.mix_original:
            for source, target in zip(_lines(corpus / f"{original}.{src}"), _lines(corpus / f"{original}.{tgt}"),
                                      strict=True):
                source_file.write(source + "\n")
                target_file.write(target + "\n")
                counts["original"] += 1
    if counts["distilled"] + counts["original"] == 0:
        where = f" in {direction_name(direction)}" if direction else ""
        raise EncdecError(f"No distilled pair is left{where}: {counts['empty']} translations were empty and "
                          f"{counts['below_min_score']} scored below min_score={config.min_score}; lower min_score "
                          "(or set it to null).")
    return counts


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", newline="") as f:
        for line in f:
            yield line.removesuffix("\n")


def _per_token(tokenizer: Any, batch: list[tuple[str, tuple[str, float | None]]]) -> Iterable[float | None]:
    """The teacher's log-probability per target token (its tokens and ``</s>``, as the score counts them)."""
    texts = [text for _, (text, _) in batch]
    lengths = [len(ids) for ids in tokenizer(text_target=texts)["input_ids"]]
    return [None if score is None else score / length for (_, (_, score)), length in zip(batch, lengths, strict=True)]


def teacher_description(config: DistillConfig) -> str:
    """The teacher as the student's model card names it: its folder(s) and decoding."""
    t = config.teacher
    engine = [f"engine {t.engine}"] if t.engine != DEFAULT_ENGINE else []
    decoding = ", ".join(in_words(asked_of(t, TEACHER)) + engine)
    kind = "the ensemble of " if len(t.models) > 1 else ""
    return f"{kind}{' + '.join(map(shown_path, t.models))}" + (f" ({decoding})" if decoding else "")


def shown_path(folder: str) -> str:
    """A folder as a card shows it: relative to the working directory when inside it (``runs/teacher``, not
    ``/home/me/project/configs/../runs/teacher``), else resolved."""
    path, here = Path(folder).resolve(), Path.cwd().resolve()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def student_config(config: DistillConfig, student: RunConfig, corpus: Path, splits: Iterable[str],
                   directions: list[str] | None = None) -> RunConfig:
    """The student's run config with the distilled corpus as its data, training into ``<output_dir>/student``. A
    multilingual student reads the corpus's direction files (``train.de-en.de``, ...) of its ``directions``, sampled
    with its data's temperature."""
    src, tgt = languages(student.data)
    read = {"source_lang": src, "target_lang": tgt, "splits": {split: split for split in splits} | {"train": "train"}}
    if directions:  # the training split first: its files name the directions
        read = {"directions": directions, "temperature": student.data.temperature,
                "splits": {"train": "train"} | {split: split for split in splits}}
    data = DataSpec(format="text", data_dir=str(corpus), num_proc=student.data.num_proc,
                    cache_dir=student.data.cache_dir, distilled_from=teacher_description(config), **read)
    output_dir = Path(config.output_dir) / STUDENT_SUBDIR
    # an interrupted student (with or without a checkpoint yet) goes on: from step 0 when none was kept
    resume = output_dir.is_dir() and any(output_dir.iterdir())
    training = dataclasses.replace(student.training, output_dir=str(output_dir),
                                   resume_from_checkpoint=resume or student.training.resume_from_checkpoint)
    return dataclasses.replace(student, data=data, training=training)


# --- the workflow --------------------------------------------------------------------------------------------------

def distill(config: DistillConfig) -> dict[str, Any]:
    """Run the stages that are not finished yet (see the module docstring); returns the manifest, with the
    student's results under ``student``."""
    student = load_run_config(config.student, config.student_overrides)
    for model in config.teacher.models:
        require_file(Path(model) / "config.json", "teacher model config")
    tokenizer = check_tokenizers(config, student)
    corpus = config.corpus
    manifest = check_manifest(corpus / "manifest.json", recipe_record(config, student))  # before anything is written
    if "corpus" not in manifest["stages"]:
        manifest = make_corpus(config, corpus, manifest, tokenizer, student)
    sources = manifest["stages"]["sources"]
    splits = [split for split in sources if split != "train"]
    run = student_config(config, student, corpus, splits, list(sources["train"]) if student.data.multilingual else None)
    results_path = Path(run.training.output_dir) / "eval_results.json"  # the last file a finished run writes
    if results_path.is_file():
        logger.info("student: already trained in %s", run.training.output_dir)
        results = json.loads(results_path.read_text(encoding="utf-8"))
    else:
        results = train(run)
    return {**manifest, "student": results}


def make_corpus(config: DistillConfig, corpus: Path, manifest: dict[str, Any], tokenizer: Any,
                student: RunConfig) -> dict[str, Any]:
    """Stages 1 to 3, those not done yet, holding the corpus lock."""
    src, tgt = languages(student.data)
    with corpus_lock(corpus):
        manifest = read_manifest(corpus / "manifest.json") if (corpus / "manifest.json").is_file() else manifest
        if "sources" not in manifest["stages"]:
            manifest = on_main_then_all(corpus, manifest, "sources", lambda: write_direction_sources(
                student, corpus, tokenizer) if student.data.multilingual else write_sources(student, corpus))
        if "corpus" in manifest["stages"]:  # another run finished it while this one waited
            return manifest
        if student.data.multilingual:
            return distil_directions(config, corpus, manifest, tokenizer)
        if not (corpus / SCORED).is_file():
            manifest["stages"]["translation"] = timed_translation(config, corpus, src)
        return on_main_then_all(corpus, manifest, "corpus", lambda: build_corpus(config, corpus, tokenizer, src, tgt))


def timed_translation(config: DistillConfig, corpus: Path, src: str, direction: Direction | None = None
                      ) -> dict[str, Any]:
    """Stage 2 (``translate_sources``), every process taking its share of the chunks; returns the manifest's
    record of it: its time, whether it resumed an interrupted file, and the processes."""
    began, resumed = time.perf_counter(), ChunkFile.interrupted(scored_file(corpus, direction))
    earlier = ChunkFile.recorded_seconds(scored_file(corpus, direction))
    translate_sources(config, corpus, src, direction)
    seconds = round(time.perf_counter() - began, 1)
    # every attempt up to the last chunk each finished (None: an older partial file kept no count)
    return {"seconds": seconds, "resumed": resumed, "processes": rank_and_world()[1],
            "seconds_all_attempts": None if earlier is None else round(earlier + seconds, 1)}


# --- a multilingual student: the stages a direction at a time -------------------------------------------------------

def check_multilingual_teacher(config: DistillConfig, tokenizer: Any) -> None:
    """A multilingual student learns every direction of its data, each translated by the teacher: the teacher must
    be multilingual, and takes no one direction of its own."""
    if config.teacher.source_lang or config.teacher.target_lang:
        raise EncdecError("teacher.source_lang and teacher.target_lang choose the one direction of a bilingual "
                          "student, but the student's data is multilingual (data.languages, data.directions or "
                          "data.pair_dirs) and the teacher translates each of its directions. Drop the two keys, or "
                          "give the student bilingual data.")
    if not language_ids(tokenizer):
        raise EncdecError(f"The student's data is multilingual, but the teacher ({config.teacher.models[0]}) is "
                          "bilingual (it has no language tokens). Distil a multilingual student from a multilingual "
                          "teacher, or give the student the teacher's one pair (bilingual data).")


def write_direction_sources(student: RunConfig, corpus: Path, tokenizer: Any) -> dict[str, dict[str, int]]:
    """Stage 1 for a multilingual student: each direction of each split as direction files
    (``original.de-en.de`` / ``.en`` for the training split, ``validation.de-en.*``, ...); returns the line counts
    by split and direction. Every training direction is checked against the teacher's languages first."""
    splits = load_data(student.data)
    for source, target in split_by_direction(splits["train"]) if "train" in splits else ():
        try:
            check_languages(source, target, language_ids(tokenizer))
        except EncdecError as err:
            raise EncdecError(f"The student's data has the direction {source}-{target}, which the teacher cannot "
                              f"translate: {err}") from err
    counts: dict[str, dict[str, int]] = {}
    for split, data in splits.items():
        name = "original" if split == "train" else split
        counts[split] = {direction_name(d): write_aligned_splits(
            {split: part}, corpus, d, names={split: f"{name}{stem(d)}"})[split] for d, part in
            split_by_direction(data).items()}
    if not counts.get("train"):
        raise EncdecError("The student's data has no training pairs to distil (its `data` section gives no train "
                          "split, or an empty one).")
    return counts


def distil_directions(config: DistillConfig, corpus: Path, manifest: dict[str, Any], tokenizer: Any
                      ) -> dict[str, Any]:
    """Stages 2 and 3 a direction at a time: the teacher translates each training direction's sources into its
    target language (each direction's record written to the manifest as it finishes, so that a resumed run keeps
    the finished ones), then each direction's pairs are filtered into ``train.SRC-TGT.*``."""
    directions = parse_directions(list(manifest["stages"]["sources"]["train"]), list(language_ids(tokenizer)),
                                  f"{corpus / 'manifest.json'}")
    for direction in directions:
        if not scored_file(corpus, direction).is_file():
            record = {direction_name(direction): timed_translation(config, corpus, direction[0], direction)}
            done = manifest["stages"].get("translation", {})
            manifest = on_main_then_all(corpus, manifest, "translation", lambda: {**done, **record})  # noqa: B023
    return on_main_then_all(corpus, manifest, "corpus", lambda: build_directions(config, corpus, tokenizer, directions))


def build_directions(config: DistillConfig, corpus: Path, tokenizer: Any, directions: list[Direction]
                     ) -> dict[str, Any]:
    """Stage 3 of each direction (``build_corpus``, with the tokenizer set to it: a score per token counts the
    target language's token); returns the counts summed over the directions, and each direction's."""
    each = {}
    for direction in directions:
        tokenizer.src_lang, tokenizer.tgt_lang = direction
        each[direction_name(direction)] = build_corpus(config, corpus, tokenizer, *direction, direction)
    return {key: sum(counts[key] for counts in each.values()) for key in next(iter(each.values()))} | {
        "directions": each}


def on_main_then_all(corpus: Path, manifest: dict[str, Any], stage: str, run: Any) -> dict[str, Any]:
    """``run()`` on the main process, its result recorded as ``stage`` in the manifest (written atomically); every
    process then reads that manifest. A refusal on the main process is raised on every process."""
    def make() -> None:
        corpus.mkdir(parents=True, exist_ok=True)
        manifest["stages"][stage] = run()
        atomic_write_json(corpus / "manifest.json", manifest)

    on_main(Shard(), make)
    process_state().wait_for_everyone()
    return read_manifest(corpus / "manifest.json")


@contextlib.contextmanager
def corpus_lock(corpus: Path) -> Iterator[None]:
    """Hold ``corpus/.lock`` while writing the corpus: two runs that share a ``corpus_dir`` must not both translate
    into it. The second is refused at once, naming the first one's PID (on the main process; the others follow)."""
    if not is_main_process():
        yield
        return
    with WriterLock(corpus / ".lock", f"The distillation corpus in {corpus}"):
        yield


__all__ = ["CORPUS_SUBDIR", "STUDENT_SUBDIR", "DistillConfig", "TeacherSettings", "distill", "load_distill_config"]
