"""What each ``encdec`` subcommand does once its arguments are parsed: ``cmd_NAME(args)`` checks what the flags
alone decide and calls one function of the package. Each imports what it needs from ``encdec`` inside the function,
so that only the command that runs pays for importing torch and transformers (see ``encdec_cli``'s docstring)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any


def usage_error(message: str) -> Exception:
    """An ``encdec.errors.EncdecError`` (imported when raised: see the module docstring), which ``run`` prints as
    one line."""
    from encdec.errors import EncdecError

    return EncdecError(message)


def cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from encdec.tokenization import train_tokenizer_from_files

    tokenizer = train_tokenizer_from_files(args.files, args.output, vocab_size=args.vocab_size,
                                           algorithm=args.algorithm, pre_tokenizer=args.pre_tokenizer,
                                           min_frequency=args.min_frequency, overwrite=args.overwrite)
    print(f"tokenizer with {len(tokenizer)} entries saved to {args.output}")


def cmd_train(args: argparse.Namespace) -> None:
    from encdec.processes import is_main_process
    from encdec.progress import format_scores
    from encdec.training import load_run_config, resume_hint, train

    config = load_run_config(args.config, args.overrides)
    try:
        results = train(config)
    except KeyboardInterrupt:  # Ctrl-C: one line (the checkpoint kept, the command that resumes), no traceback
        close_progress_bars()  # Trainer's bar would otherwise redraw itself after the message, at exit
        if is_main_process():
            hint = resume_hint(config.training.output_dir, ["encdec", "train", args.config, *args.overrides])
            print(f"\nencdec train: {hint}", file=sys.stderr)
        raise SystemExit(130) from None
    if is_main_process():  # under `accelerate launch`, one summary, not one per process
        for split in ("validation", "test"):
            if split in results:
                print(f"{split}: {format_scores(results[split])}")
        print(f"model folder: {config.training.output_dir} (every score: eval_results.json there)")


def cmd_distill(args: argparse.Namespace) -> None:
    from encdec.processes import is_main_process
    from encdec.progress import format_scores
    from encdec.recipes.distill import STUDENT_SUBDIR, distill, load_distill_config

    config = load_distill_config(args.config, args.overrides)
    try:
        results = distill(config)
    except KeyboardInterrupt:  # Ctrl-C: every stage resumes, so the same command goes on
        close_progress_bars()
        if is_main_process():
            print(f"\nencdec distill: stopped; every finished stage is kept in {config.output_dir}. Go on with: "
                  f"{shlex.join(['encdec', 'distill', args.config, *args.overrides])}", file=sys.stderr)
        raise SystemExit(130) from None
    if is_main_process():
        counts = results["stages"]["corpus"]
        print(f"distilled corpus: {counts['distilled']:,} of {counts['translated']:,} teacher translations kept "
              f"({counts['empty']:,} empty, {counts['below_min_score']:,} below min_score), {counts['original']:,} "
              f"original pairs added; manifest: {config.corpus / 'manifest.json'}")
        for name, each in counts.get("directions", {}).items():  # a multilingual student's
            print(f"  {name}: {each['distilled']:,} of {each['translated']:,} kept")
        for split in ("validation", "test"):
            if split in results["student"]:
                print(f"student {split}: {format_scores(results['student'][split])}")
        print(f"student model folder: {Path(config.output_dir) / STUDENT_SUBDIR}")


def cmd_data(args: argparse.Namespace) -> None:
    from encdec.data.text_files import data_file_names, write_data_folder
    from encdec.training import load_run_config

    overrides = take_data_options(args)
    config = load_run_config(args.config, overrides)
    counts = write_data_folder(config.data, args.output, overwrite=args.overwrite, inputs=[args.config])
    for name, lines in counts.items():  # a split ("test": test.src, test.tgt) or a direction's ("test.de-en")
        files = ", ".join(str(Path(args.output) / file) for file in data_file_names(name))
        print(f"{name}: {lines:,} lines in {files}")


def take_data_options(args: argparse.Namespace) -> list[str]:
    """``encdec data``'s ``--output DIR`` and ``--overwrite`` given after the config, where the overrides take every
    argument (as ``encdec train``'s do), moved into ``args``; returns the overrides left."""
    kept, items = [], list(args.overrides)
    while items:
        item = items.pop(0)
        if item == "--overwrite":
            args.overwrite = True
        elif item == "--output" or item.startswith("--output="):
            value = item.split("=", 1)[1] if "=" in item else items.pop(0) if items else ""
            if not value or value.startswith("--"):
                raise usage_error("--output needs a folder: --output DIR (e.g. --output data/dates).")
            args.output = value
        else:
            kept.append(item)
    if args.output is None:
        raise usage_error(f"encdec data needs --output DIR, the folder for the split files, e.g. "
                          f"{shlex.join(['encdec', 'data', args.config, '--output', 'data/dates'])}.")
    return kept


def close_progress_bars() -> None:
    """Close the tqdm progress bars still open (an interrupted run's), so that nothing is drawn after a message."""
    from tqdm.auto import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def cmd_evaluate(args: argparse.Namespace) -> None:
    from encdec.decoding_options import DECODING, asked_of
    from encdec.inference.evaluation import evaluate_model

    if args.card_dataset and len(args.model) > 1:  # refused before any work
        raise usage_error("--card-dataset writes one model's card; an ensemble has none. Drop --card-dataset or "
                          "evaluate one --model.")
    model = args.model[0] if len(args.model) == 1 else args.model
    settings = dict(batch_size=args.batch_size, output_file=args.output, overwrite=args.overwrite,
                    engine=args.engine, quantize=args.quantize, dtype=args.dtype, chunk_size=args.chunk_size,
                    show_progress=not args.quiet, **asked_of(args, DECODING))
    if args.test_dir is not None:
        print(json.dumps(evaluate_test_dir(args, model, settings), indent=2))
        return
    if args.source_file is None or args.reference_file is None or args.directions is not None:
        raise usage_error("encdec evaluate needs --source-file and --reference-file, or --test-dir DIR (with "
                          "--directions) for a multilingual model's test folder.")
    results = evaluate_model(model, args.source_file, args.reference_file, **settings)
    if args.card_dataset:
        from encdec.cards import record_scores_in_card

        split = args.card_split or Path(args.source_file).name.split(".")[0]
        record_scores_in_card(model, results, args.card_dataset, split, dataset_id=args.card_dataset_id)
    print(json.dumps(results, indent=2))


def evaluate_test_dir(args: argparse.Namespace, model: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """``encdec evaluate --test-dir DIR [--directions LIST]``: every direction of a multilingual test folder."""
    from encdec.inference.evaluation import evaluate_directions

    given = [flag for flag, value in (("--source-file", args.source_file), ("--reference-file", args.reference_file),
                                      ("--card-dataset", args.card_dataset)) if value is not None]
    if given:
        raise usage_error(f"--test-dir gives each direction its files and languages; drop {given[0]}.")
    return evaluate_directions(model, args.test_dir, args.directions, **settings)


def resolved_flags(args: argparse.Namespace, asked: dict[str, Any]) -> None:
    """What the flags ask, resolved against the first model's generation config before anything loads
    (``encdec.decoding_options.resolve``): a mistake is refused naming its flag, and what resolving decided beyond
    the flags (``--n-best K`` widens a narrower default beam to K) is said in one line. A folder that cannot be read
    is left to loading, which says what is wrong."""
    from encdec.errors import OptionError
    from encdec.inference.decoding import model_defaults
    from encdec.processes import is_main_process

    try:
        options = model_defaults(args.model[0], ranked=True, split_sentences=args.split_sentences is not None,
                                 **asked)
    except OptionError:
        raise
    except (OSError, ValueError, TypeError):
        return
    for note in options.said(lambda name: "--" + name.replace("_", "-")) if is_main_process() else ():
        print(f"encdec translate: {note}", file=sys.stderr)


def cmd_translate(args: argparse.Namespace) -> None:
    from encdec.decoding_options import DECODING, TRANSLATE, asked_of
    from encdec.inference.corpus import TranslationOutput, translate_file
    from encdec.processes import is_main_process

    args.alignment_layer = layer_argument(args.alignment_layer, "--alignment-layer")
    asked, shown = asked_of(args, DECODING), asked_of(args, TRANSLATE)
    resolved_flags(args, {**asked, **shown})
    split = None if args.split_sentences is None else split_language(args)
    form = TranslationOutput(**shown, split_sentences=split)
    stdin = getattr(sys.stdin, "buffer", None) or (line.encode("utf-8") for line in sys.stdin)  # tests swap stdin
    lines = translate_file(args.model, args.input, args.output, form=form, chunk_size=args.chunk_size,
                           resume=args.resume, overwrite=args.overwrite, quiet=args.quiet, engine=args.engine,
                           quantize=args.quantize, dtype=args.dtype, stdin=stdin, batch_size=args.batch_size,
                           **asked)  # left out: the model's generation config
    if not lines and is_main_process():
        print(f"encdec translate: {args.input or 'standard input'} is empty: nothing to translate, so the output is "
              "empty too.", file=sys.stderr)


def split_language(args: argparse.Namespace) -> str:
    """``--split-sentences [LANG]``: the language whose rules cut the sentences (a multilingual model's
    ``--source-lang``, else the model card's source language when none is given; "" when the card names none:
    sentencex's English rules, ``inference.sentences``)."""
    from encdec.inference.sentences import card_source_language

    return args.split_sentences or args.source_lang or card_source_language(args.model[0]) or ""


def layer_argument(value: str | None, flag: str) -> int | str | None:
    """``--alignment-layer``/``--layer``: an integer, ``mean``, or None."""
    if value is None or value == "mean":
        return value
    try:
        return int(value)
    except ValueError:
        raise usage_error(f"{flag} {value!r}: give a decoder layer number (0-based) or `mean`.") from None


def cmd_align(args: argparse.Namespace) -> None:
    from encdec.inference.evaluation import align_file, choose_layer_on_files

    if args.gold_file:
        report = choose_layer_on_files(args.model, args.source_file, args.target_file, args.gold_file,
                                       record=args.record, source_lang=args.source_lang, target_lang=args.target_lang)
        print(json.dumps(report, indent=2))
        return
    if args.record:
        raise usage_error("--record needs --gold-file: the layer is chosen by its error rate on gold alignments.")
    if args.output:
        from encdec.io_utils import refuse_overlap

        refuse_overlap(args.output, [args.model, args.source_file, args.target_file])
    align_file(args.model, args.source_file, args.target_file, layer_argument(args.layer, "--layer"),
               head=args.head, output_file=args.output, source_lang=args.source_lang, target_lang=args.target_lang,
               resume=args.resume, overwrite=args.overwrite, quiet=args.quiet, chunk_size=args.chunk_size,
               stdout=None if args.output else sys.stdout)


def cmd_average(args: argparse.Namespace) -> None:
    from encdec.training.averaging import average_checkpoints

    path = average_checkpoints(args.checkpoints, args.output, tokenizer_dir=args.tokenizer, overwrite=args.overwrite)
    print(f"the average of {len(args.checkpoints)} checkpoints saved to {path}")


def cmd_push(args: argparse.Namespace) -> None:
    from encdec.ship.hub import push_model

    url = push_model(args.model, args.repo_id, private=args.private)
    print(f"pushed {args.model} to {url}")


def cmd_plot_attention(args: argparse.Namespace) -> None:
    from encdec.inference.plotting import save_attention_plot

    path = save_attention_plot(args.model, args.text, args.out, layer=layer_argument(args.layer, "--layer"),
                               head=args.head, mean=args.mean, overwrite=args.overwrite)
    print(f"attention heatmap written to {path}")


def cmd_export(args: argparse.Namespace) -> None:
    from encdec.backends import export_formats
    from encdec.errors import EncdecError

    if len(args.model) > 1:
        raise EncdecError(f"`encdec export` exports one model folder, got {len(args.model)} --model: an ensemble has "
                          "no single graph; export each member and translate with --engine torch for the ensemble.")
    backend = export_formats()[args.format]  # the registry's: encdec_cli.parser offers its formats as --format
    quantize = args.quantization or backend.export_quantize[0]
    print(backend.export_function()(args.model[0], args.output, quantize=quantize, overwrite=args.overwrite))


def cmd_import(args: argparse.Namespace) -> None:
    from encdec.marian.importer import describe, import_marian

    print(describe(import_marian(args.source, args.output, overwrite=args.overwrite)))


def cmd_serve(args: argparse.Namespace) -> None:
    from encdec.serve.apis import settings_from
    from encdec.serve.server import serve
    from encdec.serve.service import ServeLimits

    limits = ServeLimits(**{item.name: getattr(args, item.name) for item in dataclasses.fields(ServeLimits)})
    serve(args.model, engine=args.engine, quantize=args.quantize, dtype=args.dtype, host=args.host, port=args.port,
          api_key=args.api_key, limits=limits, log_level=args.log_level, api_keys_db=args.api_keys_db,
          metrics=args.metrics, offline_site=args.offline_site, trusted_proxies=args.trusted_proxies,
          api_settings=settings_from(args))


def cmd_keys(args: argparse.Namespace) -> None:
    from encdec.serve.keys import KeyDatabase

    if args.action != "add" and not Path(args.db).is_file():
        raise usage_error(f"no key database at {args.db}; `encdec keys --db {args.db} add` creates one.")
    database = KeyDatabase(args.db)
    try:
        if args.action == "add":
            added = database.add(args.req_limit, args.key, args.char_limit)
            database.set_quota(added.key, args.char_quota)
            print(added.key)
        elif args.action == "remove":
            if not database.remove(args.key):
                raise usage_error(f"no key {args.key} in {args.db}; `encdec keys --db {args.db} list` lists them.")
            print(f"removed {args.key}")
        else:
            keys = database.all()
            for key in keys:
                chars = "" if key.char_limit is None else f", {key.char_limit} characters a text"
                quota = database.usage(key.key, "")[1]
                chars += "" if quota is None else f", {quota} characters a month through DeepL's API"
                print(f"{key.key}: {key.req_limit} requests a minute{chars}")
            print(f"{len(keys)} key(s) in {args.db}", file=sys.stderr)
    finally:
        database.close()


def cmd_demo(args: argparse.Namespace) -> None:
    from encdec.recipes.demo import run_demo

    run_demo(args.runs_dir, args.max_steps)

