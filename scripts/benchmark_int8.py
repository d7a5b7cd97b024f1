"""When does int8 pay? int8 against float32 per engine and model size; writes docs/fast-inference.md's table.

    python scripts/benchmark_int8.py                 # every model, 1 and 2 threads; rewrites the doc's int8 section
    python scripts/benchmark_int8.py --quick --output -   # smoke run: 2 pairs of a small batch, prints the table

For each model of ``MODELS``, from the test suite's tiny ones through the demos' to the Multi30k recipes', a model is
built with random weights at its run config's dimensions and vocabulary size (speed does not depend on training).
Output length does, so every output is forced to exactly ``--new-tokens`` tokens: ``min_new_tokens =
max_new_tokens`` in torch, ``min_decoding_length = max_decoding_length`` in CTranslate2 (both checked). Every
engine translates the same sources (``--sentences`` of 16 to 24 random tokens, sorted longest first as ``encdec
translate`` sorts them, in batches of ``--batch-size``), greedy and with beam 5, with the same number of threads:

- torch (both families): the model in float32 (``TorchEngine``) against the same model through
  ``encdec.inference.engines.quantize_int8`` (``--quantize int8``), in this process, which never imports ctranslate2;
- CTranslate2 (Transformers only; it has no recurrent decoder): the folder ``encdec export --format ctranslate2``
  writes (run as a subprocess), loaded with compute type float32 and int8, timed in a subprocess that imports
  ctranslate2 and never torch (``--ct2-worker``): their OpenMP runtimes slow each other in one process.

Each timing is one pass over all the sources. The two precisions alternate (float32 first, then int8 first, ...)
after one warm-up batch each, and a table cell is the median of the ratios of int8's pass to the float32 pass timed
beside it: above 1, int8 is the slower choice. The pairs of a cell are gathered in ``--rounds`` rounds, each a sweep
over every model, engine and thread count (``--repeats`` pairs a round, more for short passes until float32 has run
``--min-seconds``): on a machine shared with other work, a spell of load then falls on one round's pairs of a cell,
not on all of them, and the median passes over it. The doc's section is rewritten between
``<!-- begin: int8 -->`` and ``<!-- end: int8 -->`` (``--section``); each backend's
``int8_measured`` in src/encdec/backends.py (gathered as ``INT8_MEASURED``) holds the rule derived from it per CPU
class (``--cpu-class``: this CPU's by default; the line the CLI prints when int8 is asked for a model below the size
where it paid). On a CPU with VNNI,
``ONEDNN_MAX_CPU_ISA=AVX2 python scripts/benchmark_int8.py --cpu-class x86-avx2 --section int8-avx2`` holds
CTranslate2's oneDNN to the int8 arithmetic of an AVX2-only CPU (its speed only approximately); torch's fbgemm has
no such switch, so its rows there are VNNI int8 against AVX2-held float32.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
DOC = ROOT / "docs" / "fast-inference.md"
BEGIN, END = "<!-- begin: int8 -->", "<!-- end: int8 -->"
# the models measured, smallest to largest per family: name -> (run config under configs/, model-config keys on top
# of its JSON). The demos' and the Multi30k recipes' models, and below them the demos at the test suite's dimensions
# (tests/tiny_model_folders.py), the smallest a model gets
MODELS = {
    "tiny-transformer": ("demo-transformer.yaml", {"d_model": 64, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}),
    "demo-transformer": ("demo-transformer.yaml", {}),
    "multi30k-transformer-fast": ("multi30k-transformer-fast.yaml", {}),
    "multi30k-transformer-small": ("multi30k-transformer-small.yaml", {}),
    "multi30k-transformer-base": ("multi30k-transformer-base.yaml", {}),
    "tiny-lstm-bahdanau": ("demo-lstm-bahdanau.yaml", {"embedding_dim": 32, "hidden_size": 64}),
    "demo-lstm-bahdanau": ("demo-lstm-bahdanau.yaml", {}),
    "multi30k-lstm-bahdanau": ("multi30k-lstm-bahdanau.yaml", {}),
}
SIZE_KEY = {"transformer_seq2seq": "d_model", "rnn_seq2seq": "hidden_size"}  # what the rule's threshold reads
# the variables that hold the libraries to older kernels (CTranslate2's oneDNN: ONEDNN_MAX_CPU_ISA=AVX2 makes it add
# int8 products as an AVX2-only CPU does); fbgemm, torch's int8 kernels, has none
FORCING = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "CT2_FORCE_CPU_ISA", "ATEN_CPU_CAPABILITY")
MAX_REPEATS = 10  # the most timed pairs per cell and round that --min-seconds adds
SWITCH_PAUSE_S = 0.3  # idle time between the torch process's work and a worker's, so spinning threads have stopped


@dataclass
class Measured:
    """One model, engine and thread count: each decoding's int8 and float32 pass times, in seconds."""

    model: str
    family: str
    size: int
    parameters: int
    engine: str
    threads: int
    times: dict[int, dict[str, list[float]]]  # beams -> precision -> seconds of each timed pass

    def extend(self, times: dict[int, dict[str, list[float]]]) -> None:
        """Add one round's pass times."""
        for beams, by_precision in times.items():
            for precision, seconds in by_precision.items():
                self.times.setdefault(beams, {}).setdefault(precision, []).extend(seconds)

    def ratio(self, beams: int) -> float:
        """The median of int8's pass time over the float32 pass timed beside it: above 1, int8 is slower."""
        pairs = zip(self.times[beams]["int8"], self.times[beams]["float32"], strict=True)
        return statistics.median(int8 / float32 for int8, float32 in pairs)

    def sentences_per_s(self, beams: int, sentences: int) -> float:
        return sentences / statistics.median(self.times[beams]["float32"])


# -- the CTranslate2 worker: ctranslate2 only, never torch ----------------------------------------------------------

def ct2_worker(request: dict[str, Any]) -> dict[str, Any]:
    """Time an exported folder in float32 and int8 (the ``--ct2-worker`` process). ``request``: export_dir,
    batches (lists of source tokens), beams, new_tokens, threads, repeats. Returns beams -> precision -> seconds,
    and the compute type each translator reports."""
    import ctranslate2

    if "torch" in sys.modules:
        raise SystemExit("torch was imported into the CTranslate2 worker; its timings would be wrong")
    translators = {precision: ctranslate2.Translator(request["export_dir"], device="cpu", compute_type=precision,
                                                     intra_threads=request["threads"], inter_threads=1)
                   for precision in ("float32", "int8")}
    new_tokens = request["new_tokens"]

    def one_pass(precision: str, beams: int, warm_up: bool = False) -> float:
        start = time.perf_counter()
        for batch in request["batches"][:1] if warm_up else request["batches"]:
            results = translators[precision].translate_batch(
                batch, beam_size=beams, min_decoding_length=new_tokens, max_decoding_length=new_tokens,
                max_input_length=0)
            lengths = {len(result.hypotheses[0]) for result in results}
            if lengths != {new_tokens}:
                raise SystemExit(f"CTranslate2 generated {sorted(lengths)} tokens, not {new_tokens}")
        return time.perf_counter() - start

    times = {beams: alternate(lambda precision, b=beams, **warm: one_pass(precision, b, **warm), request["repeats"],
                              request["min_seconds"]) for beams in request["beams"]}
    return {"times": times, "compute_types": {p: t.compute_type for p, t in translators.items()}}


def alternate(one_pass: Any, repeats: int, min_seconds: float) -> dict[str, list[float]]:
    """One warm-up batch per precision (``one_pass(precision, warm_up=True)``), then timed pairs of passes, float32
    first and int8 first in turn: ``repeats`` of them, and more (up to ``MAX_REPEATS``) until float32 has run
    ``min_seconds``, so that a small model's short passes, which a busy machine's noise moves most, still add up to
    a stable median."""
    for precision in ("float32", "int8"):
        one_pass(precision, warm_up=True)
    times: dict[str, list[float]] = {"float32": [], "int8": []}
    repeat = 0
    while repeat < repeats or (sum(times["float32"]) < min_seconds and repeat < MAX_REPEATS):
        for precision in ("float32", "int8") if repeat % 2 == 0 else ("int8", "float32"):
            times[precision].append(one_pass(precision))
        repeat += 1
    return times


# -- models, sources, torch timings ---------------------------------------------------------------------------------

def build_folder(name: str, root: Path) -> tuple[Path, Any]:
    """A randomly initialised model ``name`` of ``MODELS`` (its run config's model JSON and vocabulary size) saved
    with a word-level tokenizer of that size, as ``encdec train`` would save it. Returns the folder and the model."""
    import torch

    from benchmarks.engines import word_tokenizer
    from encdec.folders import save_for_pipeline
    from encdec.training import build_model, build_model_config, load_run_config

    run_config, overrides = MODELS[name]
    config = load_run_config(CONFIGS / run_config)
    config.model_overrides.update(overrides)
    tokenizer = word_tokenizer(config.tokenizer.vocab_size)
    torch.manual_seed(0)
    model = build_model(build_model_config(config, tokenizer), config.generation, tokenizer).eval()
    return save_for_pipeline(model, tokenizer, root / name), model


def make_sources(sentences: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Random sources of 16 to 24 ordinary ids then ``</s>`` (id 2), longest first (``encdec translate``'s order)."""
    rng = random.Random(seed)
    sources = [[rng.randrange(4, vocab_size) for _ in range(rng.randint(16, 24))] + [2] for _ in range(sentences)]
    return sorted(sources, key=len, reverse=True)


def batches_of(items: list, size: int) -> list[list]:
    return [items[start:start + size] for start in range(0, len(items), size)]


def torch_engines(model: Any) -> dict[str, Any]:
    """The model in float32 (``TorchEngine``) and through ``quantize_int8`` (what ``--quantize int8`` runs)."""
    from encdec.inference.engines import TorchEngine, quantize_int8

    return {"float32": TorchEngine(model), "int8": TorchEngine(quantize_int8(model))}


def time_torch(engines: dict[str, Any], batches: list[list[list[int]]], args: argparse.Namespace, threads: int
               ) -> dict[int, dict[str, list[float]]]:
    """``TorchEngine.generate`` over every batch, with each of ``engines`` (``torch_engines``)."""
    import torch

    torch.set_num_threads(threads)
    padded = []
    for batch in batches:
        width = max(map(len, batch))
        ids = torch.tensor([row + [0] * (width - len(row)) for row in batch])
        padded.append((ids, (ids != 0).long()))

    def one_pass(precision: str, beams: int, warm_up: bool = False) -> float:
        settings = {"num_beams": beams, "min_new_tokens": args.new_tokens, "do_sample": False,
                    "num_return_sequences": 1}
        start = time.perf_counter()
        for ids, mask in padded[:1] if warm_up else padded:
            outputs = engines[precision].generate(ids, mask, args.new_tokens, settings)
            lengths = {len(output) - 1 for output in outputs}  # less the decoder start token
            if lengths != {args.new_tokens}:
                raise SystemExit(f"torch generated {sorted(lengths)} tokens, not {args.new_tokens}")
        return time.perf_counter() - start

    return {beams: alternate(lambda precision, b=beams, **warm: one_pass(precision, b, **warm), args.repeats,
                             args.min_seconds) for beams in args.beams}


def time_ct2(export_dir: Path, batches: list[list[list[int]]], args: argparse.Namespace, threads: int
             ) -> dict[int, dict[str, list[float]]]:
    """The CTranslate2 timings, from a ``--ct2-worker`` subprocess (the sources as the tokens the engine reads)."""
    time.sleep(SWITCH_PAUSE_S)
    token_batches = [[[f"t{i}" if i >= 4 else "</s>" for i in row] for row in batch] for batch in batches]
    request = {"export_dir": str(export_dir), "batches": token_batches, "beams": args.beams,
               "new_tokens": args.new_tokens, "threads": threads, "repeats": args.repeats,
               "min_seconds": args.min_seconds}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, "--ct2-worker"], input=json.dumps(request), env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the CTranslate2 worker failed:\n{done.stderr}")
    answer = json.loads(done.stdout)
    if answer["compute_types"]["int8"] == "float32":
        raise SystemExit(f"CTranslate2 did not compute in int8 on this CPU: {answer['compute_types']}")
    time.sleep(SWITCH_PAUSE_S)
    return {int(beams): times for beams, times in answer["times"].items()}


def export(folder: Path) -> Path:
    """``encdec export --format ctranslate2`` of ``folder`` (float32 weights; the worker loads them as int8 too),
    in a subprocess: ctranslate2 never enters this process."""
    output = folder.with_name(f"{folder.name}-ct2")
    subprocess.run([sys.executable, "-m", "encdec", "export", "--model", str(folder), "--format", "ctranslate2",
                    "--output", str(output)], check=True, capture_output=True)
    return output


def measure(args: argparse.Namespace) -> list[Measured]:
    """Every model built (and exported) first, then ``args.rounds`` sweeps over models, thread counts and engines,
    each adding its pairs to every cell."""
    rows: dict[tuple[str, int, str], Measured] = {}
    with tempfile.TemporaryDirectory(prefix="encdec-int8-") as tmp:
        prepared = []
        for name in args.models:
            folder, model = build_folder(name, Path(tmp))
            config = model.config
            batches = batches_of(make_sources(args.sentences, config.vocab_size), args.batch_size)
            exported = export(folder) if config.model_type == "transformer_seq2seq" and not args.torch_only else None
            prepared.append((name, model, torch_engines(model), batches, exported))
        for round_index in range(args.rounds):
            for name, model, engines, batches, exported in prepared:
                config = model.config
                for threads in args.threads:
                    for engine in ("torch", "ctranslate2") if exported is not None else ("torch",):
                        times = time_torch(engines, batches, args, threads) if engine == "torch" else \
                            time_ct2(exported, batches, args, threads)
                        row = rows.setdefault((name, threads, engine), Measured(
                            name, config.model_type, getattr(config, SIZE_KEY[config.model_type]),
                            model.num_parameters(), engine, threads, {}))
                        row.extend(times)
                        print(f"round {round_index + 1}/{args.rounds}: {describe(row, args)}", flush=True)
    return list(rows.values())


# -- the report -----------------------------------------------------------------------------------------------------

def describe(row: Measured, args: argparse.Namespace) -> str:
    ratios = ", ".join(f"beam {beams}: {row.ratio(beams):.2f}" for beams in args.beams)
    return f"{row.model} ({SIZE_KEY[row.family]} {row.size}) {row.engine}, {row.threads} thread(s): int8/float32 " \
           f"{ratios}"


def pays_from(rows: list[Measured], engine: str, family: str) -> tuple[int | None, float | None]:
    """The smallest measured size from which int8 was faster in every row (each thread count and decoding) of that
    size and of every larger one, or None where it never was; and the largest ratio measured below that size."""
    sizes = sorted({row.size for row in rows if row.engine == engine and row.family == family})
    ratios = {size: [row.ratio(beams) for row in rows if (row.engine, row.family, row.size) == (engine, family, size)
                     for beams in row.times] for size in sizes}
    threshold = None
    for size in reversed(sizes):
        if max(ratios[size]) >= 1.0:
            break
        threshold = size
    below = [ratio for size in sizes if threshold is None or size < threshold for ratio in ratios[size]]
    return threshold, max(below) if below else None


def table(rows: list[Measured], args: argparse.Namespace) -> str:
    beams_head = " | ".join(f"{'greedy' if beams == 1 else f'beam {beams}'}: int8 ÷ float32" for beams in args.beams)
    speed_head = " | ".join(f"float32 sentences/s, {'greedy' if beams == 1 else f'beam {beams}'}"
                            for beams in args.beams)
    lines = [f"| Model | Size | Parameters | Engine | Threads | {beams_head} | {speed_head} |",
             "|---|---|---:|---|---:|" + "---:|" * (2 * len(args.beams))]
    family_order = {"transformer_seq2seq": 0, "rnn_seq2seq": 1}
    for row in sorted(rows, key=lambda r: (r.engine != "torch", family_order[r.family], r.size, r.threads)):
        ratios = " | ".join(emphasised(row.ratio(beams)) for beams in args.beams)
        speeds = " | ".join(f"{row.sentences_per_s(beams, args.sentences):.0f}" for beams in args.beams)
        lines.append(f"| {row.model} | {SIZE_KEY[row.family]} {row.size} | {row.parameters / 1e6:.1f}M | "
                     f"{row.engine} | {row.threads} | {ratios} | {speeds} |")
    return "\n".join(lines)


def emphasised(ratio: float) -> str:
    """A ratio, in bold where int8 is the slower choice."""
    return f"**{ratio:.2f}**" if ratio >= 1.0 else f"{ratio:.2f}"


def rule_lines(rows: list[Measured], cpu: str) -> list[str]:
    lines = []
    for engine, family in (("torch", "transformer_seq2seq"), ("torch", "rnn_seq2seq"),
                           ("ctranslate2", "transformer_seq2seq")):
        if not any(row.engine == engine and row.family == family for row in rows):
            continue
        threshold, worst = pays_from(rows, engine, family)
        key, head = SIZE_KEY[family], f"- {engine}, {family}, {cpu}"
        if threshold is None:
            lines.append(f"{head}: int8 was slower at every size measured (up to {worst:.2f}x).")
        elif worst is None:
            lines.append(f"{head}: int8 was faster at every size measured ({key} >= {threshold}).")
        else:
            lines.append(f"{head}: int8 faster from {key} {threshold} on; below it, up to {worst:.2f}x the float32 "
                         "time.")
    return lines


def report(rows: list[Measured], args: argparse.Namespace, command: str) -> str:
    cpu = cpu_name()
    forced = " ".join(f"{name}={os.environ[name]}" for name in FORCING if name in os.environ)
    counts = [len(times["float32"]) for row in rows for times in row.times.values()]
    pairs = f"{min(counts)} to {max(counts)}" if min(counts) != max(counts) else str(counts[0])
    measured = textwrap.fill(
        f"Measured {date.today().isoformat()} on {cpu} (CPU class {args.cpu_class}"
        f"{', the kernels held by ' + forced if forced else ''}), {os.cpu_count()} cores shared with other work "
        f"(Python "
        f"{platform.python_version()}, torch {package_version('torch')}, CTranslate2 "
        f"{package_version('ctranslate2')}), by `{command}`: random weights at each model's dimensions and its run "
        f"config's vocabulary, {args.sentences} sources of 16-24 tokens in batches of {args.batch_size}, exactly "
        f"{args.new_tokens} new tokens each. A cell is the median over paired passes of int8's time over float32's "
        f"({pairs} pairs, from {args.rounds} rounds over the whole run: {args.repeats} a round, more until float32 "
        f"ran {args.min_seconds:g} s): **bold**, int8 is the slower choice.",
        width=120, break_long_words=False, break_on_hyphens=False)
    return "\n".join([
        args.begin,
        measured,
        "",
        table(rows, args),
        "",
        "The smallest size from which int8 was faster in every row (both thread counts, greedy and beam), per "
        "engine and family:",
        "",
        *rule_lines(rows, args.cpu_class),
        args.end,
    ])


def cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "this CPU"
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return found[1].strip() if found else platform.processor() or "this CPU"


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def write_section(doc: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the text between the markers ``begin`` and ``end`` in ``doc``; a doc without them gets the section at
    its end."""
    text = doc.read_text(encoding="utf-8")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## When int8 pays\n\n" + section + "\n"
    doc.write_text(text, encoding="utf-8")


def parse_args(argv: list[str]) -> argparse.Namespace:
    from encdec.inference.engines.int8 import CPU_CLASSES, cpu_class

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS,
                        help="the models measured (default: all)")
    parser.add_argument("--threads", nargs="+", type=int, help="thread counts (default: 1 2)")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5], help="beam sizes (default: 1 5)")
    parser.add_argument("--sentences", type=int, help="sources translated per pass (default: 200)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=24, help="exactly this many output tokens per sentence")
    parser.add_argument("--rounds", type=int, help="sweeps over every cell, each adding pairs to it (default: 3)")
    parser.add_argument("--repeats", type=int, help="timed pass pairs per cell and round (default: 2)")
    parser.add_argument("--min-seconds", type=float,
                        help=f"more pairs a round, up to {MAX_REPEATS}, until float32 has run this long (default: 4)")
    parser.add_argument("--torch-only", action="store_true", help="leave CTranslate2 out")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: by default 64 sentences, 1 round of 2 repeats, 1 thread")
    parser.add_argument("--cpu-class", choices=CPU_CLASSES, default=cpu_class(),
                        help="the CPU class the rules are for (default: this CPU's; x86-avx2 with "
                             "ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with VNNI)")
    parser.add_argument("--section", default="int8",
                        help="the doc section rewritten: between <!-- begin: SECTION --> and <!-- end: SECTION -->")
    parser.add_argument("--output", default=str(DOC),
                        help=f"the markdown file whose int8 section is rewritten, or - to print it (default: {DOC})")
    args = parser.parse_args(argv)
    defaults = {"sentences": 64, "rounds": 1, "repeats": 2, "min_seconds": 0.0, "threads": [1]} if args.quick else \
        {"sentences": 200, "rounds": 3, "repeats": 2, "min_seconds": 4.0, "threads": [1, 2]}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.begin, args.end = f"<!-- begin: {args.section} -->", f"<!-- end: {args.section} -->"
    return args


def main(argv: list[str]) -> None:
    if argv == ["--ct2-worker"]:  # before anything imports torch
        print(json.dumps(ct2_worker(json.load(sys.stdin))))
        return
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))  # benchmarks/ (the word-level tokenizer) is not installed
    command = shlex.join(["python", "scripts/benchmark_int8.py", *argv])
    section = report(measure(args), args, command)
    if args.output == "-":
        print(section)
    else:
        write_section(Path(args.output), section, args.begin, args.end)
        print(f"written to {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
