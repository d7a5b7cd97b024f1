"""Which int8 for ONNX Runtime? BLEU and speed of each quantization scheme; writes docs/fast-inference.md's table.

    python scripts/benchmark_int8_schemes.py --model runs/demo-transformer --model runs/demo-lstm-bahdanau \\
        --source-file dates/test.src --reference-file dates/test.tgt     # after `make demo`, `encdec data ... dates`
    python scripts/benchmark_int8_schemes.py --model M --source-file S --reference-file R --output -   # print only

Each model folder is exported once in float32 (``encdec.ship.onnx_export.export_onnx``, checked against torch),
then quantized with every scheme of ``INT8_SCHEMES`` (ONNX Runtime's ``quantize_dynamic``: U8S8 with full-range
weights, the scheme before; U8S8 with 7-bit weights; U8U8; each per channel and per tensor). Every copy translates
the sources with ``--engine onnxruntime`` (``--threads`` intra-op threads, batches of ``--batch-size``), greedy and
at beam 5, and is scored with cased sacreBLEU against the references. The copies alternate in ``--rounds`` rounds
(a pass each per round and beam); a speed is the median pass's sentences/s. Per scheme, the table says whether its
graphs are right on every CPU: whether ``saturating_weights`` finds an int8 weight whose products with uint8
activations could overflow the 16-bit sums of x86 CPUs without VNNI (the outputs of such a graph measured here, on
this CPU, are what a CPU with VNNI computes). The doc's section between ``<!-- begin: int8-schemes -->`` and
``<!-- end: int8-schemes -->`` is rewritten.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import torch

from encdec.inference import load_engine, translate
from encdec.inference.engines.int8 import cpu_class
from encdec.inference.engines.onnx_layout import read_layout
from encdec.inference.evaluation import score_translations
from encdec.ship.onnx_export import INT8_SCHEME, INT8_SCHEMES, export_onnx, quantize_graphs, saturating_weights

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_int8 import cpu_name, package_version, write_section  # noqa: E402

DOC = ROOT / "docs" / "fast-inference.md"
BEGIN, END = "<!-- begin: int8-schemes -->", "<!-- end: int8-schemes -->"
FLOAT32 = "float32"


def prepare(model_dir: Path, root: Path, schemes: list[str]) -> dict[str, tuple[Path, int]]:
    """scheme (or ``float32``) -> its export folder and how many of its int8 weights could saturate."""
    base = export_onnx(model_dir, root / FLOAT32)
    layout = read_layout(base)
    folders = {FLOAT32: (base, 0)}
    for scheme in schemes:
        folder = root / scheme
        shutil.copytree(base, folder)
        quantize_graphs(folder, layout, INT8_SCHEMES[scheme])
        replace(layout, weights="int8").write(folder)
        folders[scheme] = folder, sum(len(saturating_weights(folder / graph.file))
                                      for graph in (layout.encoder, layout.decoder))
    return folders


def measure(folders: dict[str, tuple[Path, int]], sources: list[str], references: list[str],
            args: argparse.Namespace) -> dict[str, dict]:
    """scheme -> beams -> (sentences/s, BLEU, the share of outputs equal to float32's): the median of
    ``args.rounds`` passes, the copies alternating."""
    engines = {scheme: load_engine(folder, "onnxruntime") for scheme, (folder, _) in folders.items()}
    times: dict[str, dict[int, list[float]]] = {scheme: {beams: [] for beams in args.beams} for scheme in folders}
    outputs: dict[str, dict[int, list[str]]] = {scheme: {} for scheme in folders}
    for round_index in range(args.rounds):
        order = list(folders) if round_index % 2 == 0 else list(reversed(folders))
        for beams in args.beams:
            for scheme in order:
                engine, tokenizer = engines[scheme]
                start = time.perf_counter()
                outputs[scheme][beams] = translate(engine, tokenizer, sources, num_beams=beams,
                                                   batch_size=args.batch_size)
                times[scheme][beams].append(time.perf_counter() - start)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    def same(scheme: str, beams: int) -> float:
        pairs = zip(outputs[scheme][beams], outputs[FLOAT32][beams], strict=True)
        return sum(a == b for a, b in pairs) / len(sources)

    return {scheme: {beams: (len(sources) / statistics.median(times[scheme][beams]),
                             score_translations(outputs[scheme][beams], references)["bleu"], same(scheme, beams))
                     for beams in args.beams} for scheme in folders}


def table(model: str, folders: dict[str, tuple[Path, int]], results: dict[str, dict], beams: list[int]) -> list[str]:
    lines = []
    for scheme, by_beams in results.items():
        name = "float32 (no quantization)" if scheme == FLOAT32 else INT8_SCHEMES[scheme].name
        if scheme != FLOAT32 and INT8_SCHEMES[scheme] == INT8_SCHEME:
            name = f"**{name}** (the export's)"
        risky = folders[scheme][1]
        safe = "yes" if risky == 0 else f"no: {risky} weight{'s' if risky > 1 else ''} can saturate"
        cells = " | ".join(f"{by_beams[b][1]:.2f} | {100 * by_beams[b][2]:.1f}% | {by_beams[b][0]:.1f}" for b in beams)
        lines.append(f"| {model} | {name} | {safe} | {cells} |")
    return lines


def report(rows: list[str], args: argparse.Namespace, command: str, sentences: int) -> str:
    head = " | ".join(f"{'greedy' if b == 1 else f'beam {b}'}: BLEU | = float32 | sentences/s" for b in args.beams)
    return "\n".join([
        BEGIN,
        f"Measured {date.today().isoformat()} on {cpu_name()}, CPU class {cpu_class()} (ONNX Runtime "
        f"{package_version('onnxruntime')}, "
        f"{args.threads} thread, batches of {args.batch_size}, {sentences} sentences, the median of {args.rounds} "
        f"passes, the schemes alternating; = float32: the share of outputs equal to the float32 export's) by "
        f"`{command}`.",
        "",
        f"| Model | Scheme | Right on every CPU | {head} |",
        "|---|---|---|" + "---:|" * (3 * len(args.beams)),
        *rows,
        END,
    ])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, type=Path, help="a model folder (repeatable)")
    parser.add_argument("--source-file", required=True, type=Path)
    parser.add_argument("--reference-file", required=True, type=Path)
    parser.add_argument("--limit", type=int, help="the first N lines only")
    parser.add_argument("--schemes", nargs="+", choices=INT8_SCHEMES, default=list(INT8_SCHEMES))
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=str(DOC), help=f"the markdown file rewritten, or - (default: {DOC})")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)  # the engine's sessions take as many intra-op threads as torch
    sources = args.source_file.read_text(encoding="utf-8").splitlines()[:args.limit]
    references = args.reference_file.read_text(encoding="utf-8").splitlines()[:args.limit]
    rows = []
    for model_dir in args.model:
        with tempfile.TemporaryDirectory(prefix="encdec-int8-schemes-") as tmp:
            folders = prepare(model_dir, Path(tmp), args.schemes)
            rows += table(model_dir.name, folders, measure(folders, sources, references, args), args.beams)
    section = report(rows, args, shlex.join(["python", "scripts/benchmark_int8_schemes.py", *argv]), len(sources))
    if args.output == "-":
        print(section)
    else:
        write_section(Path(args.output), section, BEGIN, END)
        print(f"written to {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
