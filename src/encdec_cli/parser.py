"""The ``encdec`` argument parser: every subcommand, its flags and their help, built with the standard library
alone, so that ``encdec --help`` and a mistyped flag answer at once; the engine and export choices come from
encdec's backend registry, a standard-library file read without importing encdec (``engine_registry``), and the
flags of each API of ``encdec serve`` from its own flags module, read the same way (``api_flags``). Each
subcommand's ``func`` is its ``encdec_cli.commands.cmd_*``."""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from .commands import (
    cmd_align,
    cmd_average,
    cmd_data,
    cmd_demo,
    cmd_distill,
    cmd_evaluate,
    cmd_export,
    cmd_import,
    cmd_keys,
    cmd_plot_attention,
    cmd_push,
    cmd_serve,
    cmd_tokenizer_train,
    cmd_train,
    cmd_translate,
)

# encdec's backend declarations (src/encdec/backends.py, standard library only): where the choices of --engine,
# --quantize, --dtype and `encdec export --format` come from. Importing it as encdec.backends would run
# encdec/__init__.py, which imports torch and transformers (seconds); `encdec --help` reads the file by its location
# instead, as a module of its own under this private name.
ENGINE_REGISTRY = "encdec.backends"
PRIVATE_ENGINE_REGISTRY = "_encdec_cli_engine_registry"
SERVED_APIS = "encdec.serve.apis"  # the APIs of `encdec serve`, read the same way for its summary
PRIVATE_SERVED_APIS = "_encdec_cli_served_apis"
# the decoding options' declaration (src/encdec/decoding_options.py, standard library only), read the same way: the
# flags of `translate` and `evaluate` come from it
OPTION_DECLARATION = "encdec.decoding_options"
PRIVATE_OPTION_DECLARATION = "_encdec_cli_option_declaration"


def engine_registry() -> ModuleType:
    """encdec's backend registry: the module itself when encdec is imported already (one registry, in which a backend
    registered at run time counts), else its file loaded without importing encdec."""
    return standalone(ENGINE_REGISTRY, PRIVATE_ENGINE_REGISTRY)


def option_declaration() -> ModuleType:
    """encdec's declaration of the decoding options (``encdec.decoding_options``), as ``engine_registry``."""
    return standalone(OPTION_DECLARATION, PRIVATE_OPTION_DECLARATION)


def standalone(dotted: str, private: str) -> ModuleType:
    """The module ``dotted`` of encdec when encdec is imported already, else its file loaded without importing encdec
    (a standard-library module), under the name ``private``."""
    for name in (dotted, private):
        if name in sys.modules:
            return sys.modules[name]
    package = importlib.util.find_spec("encdec")  # finds the package without running its __init__
    path = Path(next(iter(package.submodule_search_locations)), *dotted.split(".")[1:]).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(private, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module  # dataclasses looks the module up while it defines its classes
    spec.loader.exec_module(module)
    return module


def add_engine_options(p: argparse.ArgumentParser, engine_help: str | None, quantize_help: str,
                       dtype_help: str) -> None:
    """--engine, --quantize and --dtype, their choices read from encdec's engine registry."""
    registry = engine_registry()
    choices = registry.option_choices()
    p.add_argument("--engine", choices=choices["engine"], default=registry.DEFAULT_ENGINE, help=engine_help)
    p.add_argument("--quantize", choices=choices["quantize"], default=None, help=quantize_help)
    p.add_argument("--dtype", choices=choices["dtype"], default=None, help=dtype_help)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a mistyped value is refused at once, before anything loads)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def proxy_list(value: str) -> list[str]:
    """``--trusted-proxies``: IP addresses and networks, comma-separated (``*``: any peer)."""
    proxies = [item.strip() for item in value.split(",") if item.strip()]
    for proxy in (proxy for proxy in proxies if proxy != "*"):
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{proxy!r} is not an IP address or network (CIDR, e.g. 10.0.0.0/8)") \
                from None
    if not proxies:
        raise argparse.ArgumentTypeError("give at least one address, e.g. 127.0.0.1")
    return proxies


def api_flags() -> list[tuple[ModuleType, ModuleType]]:
    """The APIs of ``encdec serve`` that have flags of their own, each with its flags module (``encdec.serve.apis``),
    read as ``engine_registry``."""
    listed = standalone(SERVED_APIS, PRIVATE_SERVED_APIS).ADAPTERS
    return [(api, standalone(api.flags, f"_encdec_cli_flags_{api.flags.replace('.', '_')}")) for api in listed
            if api.flags]


def add_serve_command(commands: argparse._SubParsersAction) -> None:
    summary = "serve models over HTTP: " + "; ".join(api.summary for api in standalone(SERVED_APIS,
                                                                                       PRIVATE_SERVED_APIS).ADAPTERS)
    apis = api_flags()
    p = commands.add_parser("serve", help=summary, description=summary + ".")
    p.add_argument("--model", required=True, action="append",
                   help="a model folder (for an engine of `encdec export`'s: the folder it wrote); repeat it to serve "
                        "several, each as SRC-TGT=DIR (e.g. de-en=runs/a), optionally with its own ,engine=E "
                        ",quantize=Q ,dtype=D; a plain DIR takes its pair from its model card")
    add_engine_options(p, None, "as for `encdec translate`", "as for `encdec translate`")
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
                   help="the largest budget of new tokens a request may ask (default: the model's positions - 1)")
    p.add_argument("--max-beams", type=int, default=8, help="the largest beam size a request may ask")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000, help="largest request body")
    add_limit_options(p, apis)
    for api, flags in apis:  # each API's own flags, from its flags module (encdec.serve.apis)
        flags.add_flags(p.add_argument_group(api.summary))
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.add_argument("--offline-site", metavar="SITE", default=None,
                   help="also serve at /offline/ the site that `encdec export --format web` wrote (it translates in "
                        "the browser)")
    add_threads_option(p)
    p.set_defaults(func=cmd_serve)


def add_limit_options(p: argparse.ArgumentParser, apis: list[tuple[ModuleType, ModuleType]]) -> None:
    """`encdec serve`'s keys, limits and metrics (encdec.serve.limits, encdec.serve.metrics); ``apis``: the APIs with
    flags (``api_flags``), which may say what --char-limit counts in them."""
    counted = ["a text of the native API", *(flags.CHAR_LIMIT for _, flags in apis if hasattr(flags, "CHAR_LIMIT"))]
    p.add_argument("--api-keys-db", default=None, metavar="PATH",
                   help="require a key of this SQLite key database (`encdec keys`), each with its own requests a "
                        "minute; created if missing; --api-key keeps working beside it")
    p.add_argument("--req-limit", type=positive_int, default=None, metavar="N",
                   help="requests a minute per client address (a text of a list counts as one) for requests "
                        "without a key of --api-keys-db; over it: 429 with Retry-After (default: no limit)")
    p.add_argument("--char-limit", type=positive_int, default=None, metavar="N",
                   help=f"characters {', or '.join(counted)}{',' if len(counted) > 1 else ''} may have (a key of "
                        "--api-keys-db may have its own; default: no limit)")
    p.add_argument("--trusted-proxies", type=proxy_list, default=None, metavar="IPS",
                   help="comma-separated addresses or networks (CIDR) of the proxies in front of the server: their "
                        "X-Forwarded-For names the client that --req-limit counts (default: none; the header is "
                        "ignored)")
    p.add_argument("--max-queue", type=positive_int, default=None, metavar="N",
                   help="texts a model's batcher may hold, waiting or being decoded; beyond it: 503 with "
                        "Retry-After (default: no bound)")
    p.add_argument("--metrics", action="store_true",
                   help="GET /metrics in Prometheus' text format (behind the API key when there is one)")


def add_keys_command(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("keys", help="API keys of `encdec serve --api-keys-db`: add, remove, list (SQLite)")
    p.add_argument("--db", required=True, metavar="PATH", help="the key database (a SQLite file; `add` creates it)")
    actions = p.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a key (printed alone on its line), or change a key's limits")
    add.add_argument("--req-limit", type=positive_int, default=60, metavar="N",
                     help="requests a minute this key may send (default 60)")
    add.add_argument("--char-limit", type=positive_int, default=None, metavar="N",
                     help="characters a text of this key may have (default: the server's --char-limit)")
    add.add_argument("--char-quota", type=positive_int, default=None, metavar="N",
                     help="characters a month this key may translate through DeepL's API (/deepl; `/v2/usage` "
                          "reports them; over it: 456; default: no quota)")
    add.add_argument("--key", default=None, help="the key itself (default: a new random one)")
    remove = actions.add_parser("remove", help="remove a key")
    remove.add_argument("key")
    actions.add_parser("list", help="list the keys and their limits")
    for action in actions.choices.values():  # main() refuses a wrong flag with its own command's usage
        action.set_defaults(parser=action)
    p.set_defaults(func=cmd_keys)


def file_reader(name: str) -> Callable[[str], object]:
    """The type of a flag whose option is read from a file: the declaration's reader ``name``, its error the flag's."""
    def read(path: str) -> object:
        from encdec import decoding_options  # a command runs: encdec is imported (not for --help alone)

        try:
            return getattr(decoding_options, name)(path)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from err

    read.__name__ = "file"
    return read


def add_option_flags(p: argparse.ArgumentParser, front: str) -> None:
    """A flag for each decoding option that ``front`` offers, from its declaration (``encdec.decoding_options``):
    ``--num-beams`` for the beam size, its help, a whole number (at least 1 where that is its bound) or a number,
    or a switch; its range is checked with the rest of the options, naming the flag."""
    for item in option_declaration().declared(front):
        flag, meta = "--" + item.name.replace("_", "-"), item.metadata
        if meta["kind"] is bool:
            p.add_argument(flag, action="store_true", help=meta["help"])
        elif meta["kind"] is dict:  # a mapping is given as a file of it, read by the declaration's reader
            p.add_argument(flag, type=file_reader(meta["read"]), default=None, metavar="FILE", help=meta["help"])
        else:
            kind = positive_int if meta["kind"] is int and meta["minimum"] == 1 else meta["kind"]
            p.add_argument(flag, type=kind, default=None, help=meta["help"])


def add_decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, action="append",
                   help="model folder (for an engine of `encdec export`'s: the folder it wrote); give it "
                        "several times for an ensemble, which averages the models' log-probabilities at each step "
                        "(the models must share one tokenizer; torch engine)")
    add_engine_options(p, engine_registry().engine_help(), engine_registry().quantize_help(),
                       "compute type (default float32)")
    add_option_flags(p, "decoding")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch (default 32)")
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
                   help="--key value pairs, e.g. --teacher.batch_size 64 --output_dir runs/other")
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
    p.add_argument("--source-file", default=None, help="the test sources, one a line (or --test-dir)")
    p.add_argument("--reference-file", default=None, help="their references, line for line")
    p.add_argument("--test-dir", default=None, metavar="DIR",
                   help="a multilingual model: score each direction of DIR's test.SRC-TGT.SRC / test.SRC-TGT.TGT "
                        "files (as `encdec data` writes them), with their languages: a result per direction and "
                        "their average (instead of --source-file, --reference-file and the languages)")
    p.add_argument("--directions", default=None, metavar="LIST",
                   help="with --test-dir: the directions to score, e.g. de-en,fr-en (default: every one found)")
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
    add_option_flags(p, "translate")
    p.add_argument("--split-sentences", nargs="?", const="", default=None, metavar="LANG",
                   help="translate each line sentence by sentence and put it back together (a sentence over the "
                        "model's length is cut, with a warning); LANG: the source language's rules (default: the "
                        "model card's source language); one translation per line: not with --n-best, --scores or "
                        "--alignments")
    add_corpus_options(p)
    add_threads_option(p)
    p.set_defaults(func=cmd_translate)


def add_corpus_options(p: argparse.ArgumentParser, resumable: bool = True) -> None:
    """The options of the commands that stream a corpus in chunks (encdec.inference.corpus)."""
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
    p.add_argument("--source-lang", default=None,
                   help="a multilingual model's source language (its token starts each source)")
    p.add_argument("--target-lang", default=None,
                   help="a multilingual model's target language (its token starts each target)")
    p.add_argument("--layer", default=None, help="decoder layer (0-based or `mean`); default as for translate")
    p.add_argument("--head", type=int, default=None, help="one head of that layer; default: the mean of its heads")
    p.add_argument("--output", default=None, help="Pharaoh alignments file (default: stdout, without --gold-file)")
    p.add_argument("--overwrite", action="store_true")
    add_corpus_options(p)
    add_threads_option(p)
    p.set_defaults(func=cmd_align)


def add_export_commands(commands: argparse._SubParsersAction) -> None:
    registry = engine_registry()
    export_help = registry.export_help()
    p = commands.add_parser("export", help=export_help["command"])
    p.add_argument("--model", required=True, action="append", help="encdec model folder (one: an ensemble has no "
                                                                    "single graph)")
    p.add_argument("--format", choices=list(registry.export_formats()), required=True, help=export_help["format"])
    p.add_argument("--output", required=True, help="the new folder (engine files, tokenizer, generation defaults)")
    p.add_argument("--quantization", "--quantize", dest="quantization", default=None,
                   choices=registry.union([spec.export_quantize for spec in registry.export_formats().values()]),
                   help=export_help["quantize"])
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_export)
    p = commands.add_parser("import", help="a Marian / OPUS-MT model (MarianMTModel folder or Hub id) as an encdec "
                                           "Transformer folder, exactly (docs/import.md)")
    p.add_argument("--from", dest="source", required=True, metavar="DIR_OR_HUB_ID",
                   help="a MarianMTModel folder (config.json, weights, source.spm, target.spm, vocab.json) or a Hub "
                        "id such as Helsinki-NLP/opus-mt-de-en")
    p.add_argument("--output", required=True, help="the new encdec model folder")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_import)
    p = commands.add_parser("plot-attention", help="heatmap of source tokens against generated tokens")
    p.add_argument("--model", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--layer", default=None,
                   help="Transformer decoder layer (0-based, negative from the top, or `mean` for all); default: the "
                        "model's alignment layer, as for `translate --alignments`")
    p.add_argument("--head", type=int, default=None, help="one head of that layer; default: the mean of its heads")
    p.add_argument("--mean", action="store_true", help="without --layer: the mean of all layers and heads "
                                                       "(--layer mean)")
    p.add_argument("--out", required=True, help="PNG path")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_plot_attention)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors (a missing flag, a wrong value) come as their one line first, then the usage:
    argparse prints the usage first, where a long one buries the line that says what is wrong. Its subcommands'
    parsers are of this class too (``add_subparsers`` makes them of the class of their parent)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n{self.format_usage()}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="encdec", description="Train, evaluate, ship and inspect seq2seq models.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_training_commands(commands)
    add_inference_commands(commands)
    add_data_command(commands)
    add_alignment_command(commands)
    add_export_commands(commands)
    add_serve_command(commands)
    add_keys_command(commands)
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
    """A wrong flag, refused in one line first (with, when a flag of the command is close, "did you mean" it: Python
    3.12's ``suggest_on_error`` does this for choices only), then the subcommand's usage (argparse would show the
    top-level one, and before the error, where a long usage buries it)."""
    import difflib

    flags = [flag for action in parser._actions for flag in action.option_strings]
    wrong = [arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")] or unknown
    close = difflib.get_close_matches(wrong[0], flags, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    parser.exit(2, f"{parser.prog}: error: unrecognized arguments: {' '.join(unknown)}{hint}\n{parser.format_usage()}")


def add_demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the model folders and plots go")
    p.add_argument("--max-steps", type=int, default=None, help="override the configs' training steps")


def add_threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=positive_int, default=None,
                   help="CPU threads per process (default: the idle cores, so that a busy machine is not "
                        "oversubscribed; or ENCDEC_THREADS / OMP_NUM_THREADS)")


