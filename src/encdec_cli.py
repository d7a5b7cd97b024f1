"""The ``encdec`` command line. Each subcommand parses its arguments and calls one function in the package.

It is a module of its own, outside the ``encdec`` package: importing ``encdec`` registers the models with
transformers, which imports torch and transformers (seconds), and ``encdec --help`` or a mistyped argument should
answer at once. So this module imports only the standard library at the top, and each command imports what it needs
from ``encdec`` once its arguments have been parsed. (``python -m encdec`` imports the package first, so only the
``encdec`` command is instant.)

A user error (a missing file, a bad config value, an existing output) prints one line naming the problem and
the fix, and exits with status 2; set ``ENCDEC_DEBUG=1`` for the full traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path


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
    from encdec.parallel import process_state
    from encdec.progress import format_scores
    from encdec.training import load_run_config, resume_hint, train

    config = load_run_config(args.config, args.overrides)
    try:
        results = train(config)
    except KeyboardInterrupt:  # Ctrl-C: one line (the checkpoint kept, the command that resumes), no traceback
        close_progress_bars()  # Trainer's bar would otherwise redraw itself after the message, at exit
        if process_state().is_main_process:
            hint = resume_hint(config.training.output_dir, ["encdec", "train", args.config, *args.overrides])
            print(f"\nencdec train: {hint}", file=sys.stderr)
        raise SystemExit(130) from None
    if process_state().is_main_process:  # under `accelerate launch`, one summary, not one per process
        for split in ("validation", "test"):
            if split in results:
                print(f"{split}: {format_scores(results[split])}")
        print(f"model folder: {config.training.output_dir} (every score: eval_results.json there)")


def cmd_distill(args: argparse.Namespace) -> None:
    from encdec.distill import STUDENT_SUBDIR, distill, load_distill_config
    from encdec.parallel import process_state
    from encdec.progress import format_scores

    config = load_distill_config(args.config, args.overrides)
    try:
        results = distill(config)
    except KeyboardInterrupt:  # Ctrl-C: every stage resumes, so the same command goes on
        close_progress_bars()
        if process_state().is_main_process:
            print(f"\nencdec distill: stopped; every finished stage is kept in {config.output_dir}. Go on with: "
                  f"{shlex.join(['encdec', 'distill', args.config, *args.overrides])}", file=sys.stderr)
        raise SystemExit(130) from None
    if process_state().is_main_process:
        counts = results["stages"]["corpus"]
        print(f"distilled corpus: {counts['distilled']:,} of {counts['translated']:,} teacher translations kept "
              f"({counts['empty']:,} empty, {counts['below_min_score']:,} below min_score), {counts['original']:,} "
              f"original pairs added; manifest: {config.corpus / 'manifest.json'}")
        for split in ("validation", "test"):
            if split in results["student"]:
                print(f"student {split}: {format_scores(results['student'][split])}")
        print(f"student model folder: {Path(config.output_dir) / STUDENT_SUBDIR}")


def cmd_data(args: argparse.Namespace) -> None:
    from encdec.data.text_files import SUFFIXES, write_data_folder
    from encdec.training import load_run_config

    overrides = take_data_options(args)
    config = load_run_config(args.config, overrides)
    counts = write_data_folder(config.data, args.output, overwrite=args.overwrite, inputs=[args.config])
    for split, lines in counts.items():
        files = ", ".join(str(Path(args.output) / f"{split}.{suffix}") for suffix in SUFFIXES)
        print(f"{split}: {lines:,} lines in {files}")


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
    from encdec.evaluation import evaluate_model

    if args.card_dataset and len(args.model) > 1:  # refused before any work
        raise usage_error("--card-dataset writes one model's card; an ensemble has none. Drop --card-dataset or "
                          "evaluate one --model.")
    model = args.model[0] if len(args.model) == 1 else args.model
    results = evaluate_model(model, args.source_file, args.reference_file, num_beams=args.num_beams,
                             batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                             output_file=args.output, overwrite=args.overwrite, length_penalty=args.length_penalty,
                             engine=args.engine, quantize=args.quantize, dtype=args.dtype,
                             chunk_size=args.chunk_size, show_progress=not args.quiet)
    if args.card_dataset:
        from encdec.cards import record_scores_in_card

        split = args.card_split or Path(args.source_file).name.split(".")[0]
        record_scores_in_card(model, results, args.card_dataset, split, dataset_id=args.card_dataset_id)
    print(json.dumps(results, indent=2))


def beams_for_n_best(args: argparse.Namespace) -> int | None:
    """The ``--num-beams`` to decode with for ``--n-best K``: K hypotheses need K beams. Without ``--num-beams`` a
    model whose default beam is narrower (the demo models decode greedily) is decoded with K beams, said in one line;
    an explicit ``--num-beams`` below K is refused, naming both flags."""
    if args.n_best is None or args.n_best <= (args.num_beams or 0):
        return args.num_beams
    if args.num_beams is not None:
        raise usage_error(f"--n-best {args.n_best} needs at least {args.n_best} beams: pass --num-beams "
                          f"{args.n_best} or more (got --num-beams {args.num_beams}), or a smaller --n-best.")
    from encdec.decoding import model_defaults

    try:  # the first model's default, as decoding resolves it (its generation_config.json)
        default = model_defaults(args.model[0]).num_beams
    except (OSError, ValueError, TypeError):
        return None  # no readable folder: loading it says what is wrong
    if args.n_best <= default:
        return None
    if os.environ.get("RANK", "0") == "0":
        print(f"encdec translate: --n-best {args.n_best} needs {args.n_best} beams; the model decodes with "
              f"{default} by default, so this run uses --num-beams {args.n_best}.", file=sys.stderr)
    return args.n_best


def cmd_translate(args: argparse.Namespace) -> None:
    from encdec.corpus import TranslationOutput, translate_file

    args.num_beams = beams_for_n_best(args)

    form = TranslationOutput(n_best=args.n_best, scores=args.scores, alignments=args.alignments,
                             alignment_layer=layer_argument(args.alignment_layer),
                             keep_duplicates=args.keep_duplicates)
    stdin = getattr(sys.stdin, "buffer", None) or (line.encode("utf-8") for line in sys.stdin)  # tests swap stdin
    lines = translate_file(args.model, args.input, args.output, form=form, chunk_size=args.chunk_size,
                           resume=args.resume, overwrite=args.overwrite, quiet=args.quiet, engine=args.engine,
                           quantize=args.quantize, dtype=args.dtype, stdin=stdin, num_beams=args.num_beams,
                           max_new_tokens=args.max_new_tokens, length_penalty=args.length_penalty,
                           batch_size=args.batch_size)  # None: the model's generation config
    if not lines and os.environ.get("RANK", "0") == "0":
        print(f"encdec translate: {args.input or 'standard input'} is empty: nothing to translate, so the output is "
              "empty too.", file=sys.stderr)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a mistyped value is refused at once, before anything loads)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def layer_argument(value: str | None) -> int | str | None:
    """``--alignment-layer``/``--layer``: an integer, ``mean``, or None."""
    if value is None or value == "mean":
        return value
    try:
        return int(value)
    except ValueError:
        raise usage_error(f"--alignment-layer {value!r}: give a decoder layer number (0-based) or `mean`.") from None


def cmd_align(args: argparse.Namespace) -> None:
    from encdec.evaluation import align_file, choose_layer_on_files

    if args.gold_file:
        report = choose_layer_on_files(args.model, args.source_file, args.target_file, args.gold_file,
                                       record=args.record)
        print(json.dumps(report, indent=2))
        return
    if args.record:
        raise usage_error("--record needs --gold-file: the layer is chosen by its error rate on gold alignments.")
    if args.output:
        from encdec.io_utils import refuse_overlap

        refuse_overlap(args.output, [args.model, args.source_file, args.target_file])
    align_file(args.model, args.source_file, args.target_file, layer_argument(args.layer), output_file=args.output,
               resume=args.resume, overwrite=args.overwrite, quiet=args.quiet, chunk_size=args.chunk_size,
               stdout=None if args.output else sys.stdout)


def cmd_average(args: argparse.Namespace) -> None:
    from encdec.averaging import average_checkpoints

    path = average_checkpoints(args.checkpoints, args.output, tokenizer_dir=args.tokenizer, overwrite=args.overwrite)
    print(f"the average of {len(args.checkpoints)} checkpoints saved to {path}")


def cmd_push(args: argparse.Namespace) -> None:
    from encdec.hub import push_model

    url = push_model(args.model, args.repo_id, private=args.private)
    print(f"pushed {args.model} to {url}")


def cmd_plot_attention(args: argparse.Namespace) -> None:
    from encdec.plotting import save_attention_plot

    path = save_attention_plot(args.model, args.text, args.out, layer=args.layer, head=args.head, mean=args.mean,
                               overwrite=args.overwrite)
    print(f"attention heatmap written to {path}")


def cmd_export(args: argparse.Namespace) -> None:
    from encdec.export import export_ctranslate2

    out = export_ctranslate2(args.model, args.output, quantization=args.quantization, overwrite=args.overwrite)
    print(f"CTranslate2 model ({args.quantization}) written to {out}; translate with "
          f"`encdec translate --engine ctranslate2 --model {out}`")


def cmd_serve(args: argparse.Namespace) -> None:
    from encdec.server import serve
    from encdec.serving import ServeLimits

    limits = ServeLimits(max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms, max_texts=args.max_texts,
                         max_source_tokens=args.max_source_tokens, max_new_tokens=args.max_new_tokens,
                         max_beams=args.max_beams, max_body_bytes=args.max_body_bytes)
    serve(args.model, engine=args.engine, quantize=args.quantize, dtype=args.dtype, host=args.host, port=args.port,
          api_key=args.api_key, limits=limits, log_level=args.log_level)


def add_serve_command(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("serve", help="serve a model over HTTP: POST /translate, a web page with the alignment")
    p.add_argument("--model", required=True, action="append",
                   help="a model folder (for --engine ctranslate2: one written by `encdec export`); repeat it to serve "
                        "several, each as SRC-TGT=DIR (e.g. de-en=runs/a), optionally with its own ,engine=E "
                        ",quantize=Q ,dtype=D; a plain DIR takes its pair from its model card")
    p.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch")
    p.add_argument("--quantize", choices=["int8"], default=None, help="as for `encdec translate`")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default=None, help="as for `encdec translate`")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind; anything but loopback needs --api-key (or ENCDEC_API_KEY)")
    p.add_argument("--port", type=int, default=8000,
                   help="port to listen on (default: 8000); 0 takes a free one, which the start-up line names")
    p.add_argument("--api-key", default=None,
                   help="require this key on every request (Authorization: Bearer KEY or X-API-Key: KEY); default: "
                        "the ENCDEC_API_KEY environment variable")
    p.add_argument("--max-batch-size", type=int, default=32, help="most texts decoded in one batch (1: no batching)")
    p.add_argument("--max-wait-ms", type=float, default=10.0,
                   help="how long the first text of a batch waits for others to join it")
    p.add_argument("--max-texts", type=int, default=64, help="most texts in one request")
    p.add_argument("--max-source-tokens", type=int, default=None,
                   help="most source tokens per text, </s> included (default: the model's max_position_embeddings)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="the largest max_new_tokens a request may ask (default: the model's positions - 1)")
    p.add_argument("--max-beams", type=int, default=8, help="the largest num_beams a request may ask")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000, help="largest request body")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    add_threads_option(p)
    p.set_defaults(func=cmd_serve)


def cmd_demo(args: argparse.Namespace) -> None:
    from encdec.demo import run_demo

    run_demo(args.runs_dir, args.max_steps)


LENGTH_PENALTY_HELP = ("beam search's length normalisation exponent: scores are log p / length**this; default: the "
                       "model's generation_config (greedy search ignores it)")


def add_decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, action="append",
                   help="model folder (for --engine ctranslate2: a folder written by `encdec export`); give it "
                        "several times for an ensemble, which averages the models' log-probabilities at each step "
                        "(the models must share one tokenizer; torch engine)")
    p.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch",
                   help="torch: the model's generate(); ctranslate2: CTranslate2 (pip install 'encdec[ct2]')")
    p.add_argument("--quantize", choices=["int8"], default=None,
                   help="int8: dynamic int8 of the linear and LSTM/GRU layers (torch), int8 compute (ctranslate2)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default=None, help="compute type (default float32)")
    p.add_argument("--num-beams", type=positive_int, default=None,
                   help="beam size; 1 = greedy; default: the model's generation_config.json (what `encdec train` "
                        "saved from the recipe's generation.num_beams; 1 if unset), as `encdec serve` uses")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch (default 32)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help="longest output; default: the model's generation_config.json, else 2 x source + 10")
    p.add_argument("--length-penalty", type=float, default=None, help=LENGTH_PENALTY_HELP)
    p.add_argument("--overwrite", action="store_true")


def add_training_commands(commands: argparse._SubParsersAction) -> None:
    tok = commands.add_parser("tokenizer", help="subword vocabularies").add_subparsers(dest="action", required=True)
    p = tok.add_parser("train", help="train a joint source/target vocabulary with `tokenizers`")
    p.add_argument("--files", nargs="+", required=True, help="text files, one sentence per line (source and target)")
    p.add_argument("--output", required=True, help="folder for the PreTrainedTokenizerFast")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--algorithm", choices=["bpe", "unigram"], default="bpe")
    p.add_argument("--pre-tokenizer", choices=["metaspace", "whitespace_punct"], default="metaspace")
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_tokenizer_train)
    p = commands.add_parser("train", help="train a model from a run config (YAML)")
    p.add_argument("config", help="run config, e.g. configs/demo-transformer.yaml")
    p.add_argument("overrides", nargs=argparse.REMAINDER,
                   help="--section.key value pairs, e.g. --training.max_steps 100")
    add_threads_option(p)
    p.set_defaults(func=cmd_train)
    p = commands.add_parser("distill", help="distil a teacher (one model or an ensemble) into a student: the teacher "
                                            "translates the training sources, the student trains on them")
    p.add_argument("config", help="distillation recipe (YAML), e.g. configs/distill-multi30k-transformer-small.yaml")
    p.add_argument("overrides", nargs=argparse.REMAINDER,
                   help="--key value pairs, e.g. --teacher.num_beams 4 --output_dir runs/other")
    add_threads_option(p)
    p.set_defaults(func=cmd_distill)
    p = commands.add_parser("average", help="average the weights of checkpoints of one run into a model folder")
    p.add_argument("checkpoints", nargs="+",
                   help="checkpoint or model folders of one model, e.g. runs/X/checkpoints/checkpoint-{7500,9000}")
    p.add_argument("--output", required=True, help="the new model folder")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the last checkpoint's tokenizer)")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_average)


def add_data_command(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("data", help="write a run config's data splits (any format, the built-in task too) as "
                                         "aligned text files DIR/{train,validation,test}.{src,tgt}")
    p.add_argument("config", help="run config, e.g. configs/demo-transformer.yaml (its data section is written)")
    p.add_argument("--output", metavar="DIR", default=None,
                   help="the new folder for the split files (required; before or after the config)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing, non-empty --output folder")
    p.add_argument("overrides", nargs=argparse.REMAINDER,
                   help="--section.key value pairs, as for `encdec train`, e.g. --data.builtin_test 1000")
    p.set_defaults(func=cmd_data)


def add_inference_commands(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("evaluate", help="BLEU (sacreBLEU, with signature) and chrF on a test set")
    add_decoding_options(p)
    p.add_argument("--source-file", required=True)
    p.add_argument("--reference-file", required=True)
    p.add_argument("--output", default=None, help="also write the results to this JSON file")
    p.add_argument("--card-dataset", default=None,
                   help="also write these scores into the model folder's README.md model card (text and model-index), "
                        "as measured on the data of this name, e.g. \"Multi30k De-En\"")
    p.add_argument("--card-split", default=None, help="split name for the card (default: the source file's stem)")
    p.add_argument("--card-dataset-id", default=None, help="Hub dataset id for the card, e.g. bentrevett/multi30k")
    add_corpus_options(p, resumable=False)
    add_threads_option(p)
    p.set_defaults(func=cmd_evaluate)
    p = commands.add_parser("translate", help="translate lines from a file or stdin")
    add_decoding_options(p)
    p.add_argument("--input", default=None, help="input file (default: stdin)")
    p.add_argument("--output", default=None, help="output file (default: stdout)")
    p.add_argument("--n-best", type=int, default=None,
                   help="up to K hypotheses per input, as lines `ID ||| HYPOTHESIS` (ID: the 0-based input line; "
                        "Moses n-best format), ordered by log P(hypothesis | input) (the SCORE), best first, each text "
                        "once; it needs K beams: without --num-beams, a model that decodes with fewer by default is "
                        "decoded with K. Fewer than K lines: the beams held fewer distinct texts (raise --num-beams)")
    p.add_argument("--keep-duplicates", action="store_true",
                   help="with --n-best: keep hypotheses whose text an earlier one already has (different token "
                        "sequences that decode to the same text); by default each text is listed once")
    p.add_argument("--scores", action="store_true",
                   help="add ` ||| SCORE` to each line: log P(hypothesis | input), natural log, </s> included")
    p.add_argument("--alignments", action="store_true",
                   help="add ` ||| i-j ...` to each line: word alignments in Pharaoh format (source word i, output "
                        "word j, 0-based) from the attention (torch engine)")
    p.add_argument("--alignment-layer", default=None,
                   help="Transformer decoder layer for --alignments (0-based, or `mean`); default: the layer "
                        "`encdec align --gold-file ... --record` chose, else the penultimate")
    add_corpus_options(p)
    add_threads_option(p)
    p.set_defaults(func=cmd_translate)


def add_corpus_options(p: argparse.ArgumentParser, resumable: bool = True) -> None:
    """The options of the commands that stream a corpus in chunks (encdec.corpus)."""
    p.add_argument("--chunk-size", type=positive_int, default=1000,
                   help="input lines read, translated and written at a time (default 1000): memory stays flat, "
                        "output follows input, and a resume restarts at the first unfinished chunk")
    if resumable:
        p.add_argument("--resume", action="store_true",
                       help="go on with an interrupted run into the same --output (its finished chunks are kept in "
                            "OUTPUT.partial); refused if the input, model or options differ")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_alignment_command(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("align", help="word alignments of given sentence pairs from a model's attention; with "
                                          "gold alignments, the alignment error rate of every decoder layer")
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("--source-file", required=True, help="one source sentence per line")
    p.add_argument("--target-file", required=True, help="one target sentence per line (e.g. translations)")
    p.add_argument("--gold-file", default=None,
                   help="gold alignments in Pharaoh format, one line per pair: report the AER of each layer and the "
                        "best one")
    p.add_argument("--record", action="store_true",
                   help="with --gold-file: record the best layer in MODEL/alignment.json for `translate --alignments`")
    p.add_argument("--layer", default=None, help="decoder layer (0-based or `mean`); default as for translate")
    p.add_argument("--output", default=None, help="Pharaoh alignments file (default: stdout, without --gold-file)")
    p.add_argument("--overwrite", action="store_true")
    add_corpus_options(p)
    add_threads_option(p)
    p.set_defaults(func=cmd_align)


def add_export_commands(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("export", help="export a Transformer model folder to a CTranslate2 model folder")
    p.add_argument("--model", required=True, help="encdec Transformer model folder")
    p.add_argument("--format", choices=["ctranslate2"], required=True)
    p.add_argument("--output", required=True, help="the new folder (engine files, tokenizer, generation defaults)")
    p.add_argument("--quantization", choices=["float32", "int8", "int8_float32", "bfloat16", "float16"],
                   default="float32", help="how the weights are stored (CTranslate2 converts them at load time)")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_export)
    p = commands.add_parser("plot-attention", help="heatmap of source tokens against generated tokens")
    p.add_argument("--model", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--layer", type=int, default=None, help="Transformer decoder layer (default: the last)")
    p.add_argument("--head", type=int, default=None, help="Transformer head (default: mean over heads)")
    p.add_argument("--mean", action="store_true", help="average over heads (and layers when no --layer)")
    p.add_argument("--out", required=True, help="PNG path")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_plot_attention)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encdec", description="Train, evaluate, ship and inspect seq2seq models.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_training_commands(commands)
    add_inference_commands(commands)
    add_data_command(commands)
    add_alignment_command(commands)
    add_export_commands(commands)
    add_serve_command(commands)
    p = commands.add_parser("push", help="push a model folder (model, tokenizer, card) to the Hugging Face Hub")
    p.add_argument("--model", required=True)
    p.add_argument("--repo-id", required=True)
    p.add_argument("--private", action="store_true")
    p.set_defaults(func=cmd_push)
    p = commands.add_parser("demo", help="train both families on the built-in date task, translate, plot attention")
    add_demo_options(p)
    add_threads_option(p)
    p.set_defaults(func=cmd_demo)
    for command in commands.choices.values():  # main() refuses a wrong flag with its own command's usage
        command.set_defaults(parser=command)
    return parser


def refuse_unknown(parser: argparse.ArgumentParser, unknown: list[str]) -> None:
    """A wrong flag, refused with the subcommand's usage (argparse would show the top-level one) and, when a flag of
    the command is close, "did you mean" it (Python 3.12's ``suggest_on_error`` does this for choices only)."""
    import difflib

    flags = [flag for action in parser._actions for flag in action.option_strings]
    wrong = [arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")] or unknown
    close = difflib.get_close_matches(wrong[0], flags, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def add_demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the model folders and plots go")
    p.add_argument("--max-steps", type=int, default=None, help="override the configs' training steps")


def add_threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=positive_int, default=None,
                   help="CPU threads per process (default: the idle cores, so that a busy machine is not "
                        "oversubscribed; or ENCDEC_THREADS / OMP_NUM_THREADS)")


def configure_threads(args: argparse.Namespace) -> None:
    """The commands that compute choose their thread count (``encdec.threads``) before they start, and say it when
    it is below the core count. ``encdec train``'s ``--threads`` may also come after the config."""
    if args.command in ("train", "distill"):
        args.threads, args.overrides = pop_option(args.overrides, "--threads", args.threads)
    if not hasattr(args, "threads"):
        return
    from encdec.threads import apply_threads, choose_threads

    choice = choose_threads(args.threads)
    apply_threads(choice)
    if choice.reduced and os.environ.get("RANK", "0") == "0":
        print(f"encdec {args.command}: {choice.describe()}", file=sys.stderr)


def pop_option(items: list[str], name: str, value: int | None) -> tuple[int | None, list[str]]:
    """``name N`` (or ``name=N``) taken out of ``items``, as a positive int; ``value`` when absent."""
    kept, items = [], list(items)
    while items:
        item = items.pop(0)
        if item == name or item.startswith(f"{name}="):
            text = item.split("=", 1)[1] if "=" in item else items.pop(0) if items else ""
            try:
                value = positive_int(text)
            except argparse.ArgumentTypeError as error:
                raise usage_error(f"{name}: {error}; give a whole number of threads, at least 1.") from None
        else:
            kept.append(item)
    return value, kept


LAUNCHER_VARIABLES = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")  # set by torchrun (and accelerate launch) in each worker
PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_launcher() -> None:
    """Under ``torchrun`` or ``accelerate launch``, end this worker when its launcher ends. The launchers start each
    worker in a process group of its own, so a ``kill -9`` of the launcher reaches no worker: they went on writing,
    and a ``--resume`` started meanwhile met them. Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) has the
    kernel send SIGKILL to the worker the moment its parent (the launcher) is gone; what the worker had finished is
    on disk, as after any ``kill -9``. A worker whose launcher is already gone ends at once. Elsewhere (macOS) this
    does nothing. Written here, with ctypes, because no maintained package offers it (python-prctl is unmaintained
    and needs a compiler)."""
    if not any(name in os.environ for name in LAUNCHER_VARIABLES) or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    launcher = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != launcher or launcher == 1:  # the launcher died before the signal was set
        os.kill(os.getpid(), signal.SIGKILL)


SHARING = {  # how a command shares its work between the processes of a launch
    "translate": "process p translates chunks p, p + N, ... and the main one writes them in order",
    "align": "process p aligns chunks p, p + N, ... and the main one writes them in order",
    "evaluate": "process p translates chunks p, p + N, ... and the main one scores them",
    "train": "each process trains on its share of every batch (data parallel) and the main one saves",
    "distill": "the teacher translates chunks p, p + N, ... on process p; the student trains data parallel",
}
CPU_LAUNCH = ("`accelerate launch --config_file configs/accelerate/cpu-2proc.yaml` (edit num_processes) or "
              "`torchrun --nproc_per_node N` start N")


def describe_processes(command: str, environ: dict[str, str] | None = None) -> str | None:
    """The line a command under a launcher prints at start (on the main process): how many processes and how the
    work is shared. ``accelerate launch --num_processes N`` without GPUs runs its plain launcher, which starts one
    process: that is said too, with the ways that start N. None outside a launcher, and on the other processes."""
    environ = os.environ if environ is None else environ
    if command not in SHARING or environ.get("RANK", "0") != "0":
        return None
    world = int(environ.get("WORLD_SIZE", "1") or 1)
    if world > 1:
        local = int(environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
        where = "" if local == world else f", {local} on this machine"
        return f"encdec {command}: {world} processes{where}: {SHARING[command]}"
    if "ACCELERATE_MIXED_PRECISION" in environ:  # set by every accelerate launcher: this is its one process
        return (f"encdec {command}: 1 process: accelerate launch started one (on a machine without GPUs, "
                f"`--num_processes N` alone starts one); {CPU_LAUNCH}")
    return None


def run(func: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    from encdec.errors import EncdecError, OptionError

    die_with_launcher()
    if line := describe_processes(args.command):
        print(line, file=sys.stderr, flush=True)
    try:
        configure_threads(args)
        func(args)
    except (EncdecError, FileNotFoundError, ValueError, OSError) as error:
        if os.environ.get("ENCDEC_DEBUG"):
            raise
        message = " ".join((error.as_flags() if isinstance(error, OptionError) else str(error)).split())  # one line
        print(f"encdec {args.command}: error: {message}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        refuse_unknown(args.parser, unknown)
    return run(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
