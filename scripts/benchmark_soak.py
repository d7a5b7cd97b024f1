"""The soak of `encdec serve`: thousands of mixed requests of both APIs, files included, the server's memory read as
they go; writes docs/serving.md's "Soak" section.

    python scripts/benchmark_soak.py                           # 5,000 requests, two date models trained here
    python scripts/benchmark_soak.py --requests 50 --every 10 --output -      # a smoke run, printed
    python scripts/benchmark_soak.py --model de-en=runs/a --model en-de=runs/b --check-flat 8

The section is rewritten between ``<!-- begin: soak -->`` and ``<!-- end: soak -->`` (``--output -`` prints it
instead): the RSS every ``--every`` requests, the requests of each kind with their statuses and latencies, and a
verdict line, the growth after ``--warmup`` requests. It exits 1, after writing, when a request got a 5xx or no
answer, the server logged a fault or died, the run stopped early (``--time-limit``), its child processes grew in
number, or the server process grew more than ``--check-flat`` MiB after the warm-up. benchmarks/soak.py holds the
method.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: benchmarks/ is not installed

from benchmarks.report import cpu_model  # noqa: E402
from benchmarks.soak import KINDS, SoakSettings, build_models, markdown, soak, verdict  # noqa: E402
from encdec.io_utils import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "serving.md"
BEGIN, END = "<!-- begin: soak -->", "<!-- end: soak -->"


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = SoakSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], metavar="PAIR=DIR",
                        help="a model to serve, as `encdec serve --model` takes it; repeat it (default: de-en and "
                             "en-de, two small date models trained here in 1-3 minutes)")
    parser.add_argument("--requests", type=int, default=defaults.requests,
                        help="requests to send (default %(default)s)")
    parser.add_argument("--clients", type=int, default=defaults.clients,
                        help="concurrent client threads (default %(default)s)")
    parser.add_argument("--every", type=int, default=defaults.every,
                        help="requests between memory samples (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=defaults.warmup,
                        help="the growth of the verdict is from the sample at this many requests (default %(default)s)")
    parser.add_argument("--time-limit", type=float, default=defaults.time_limit,
                        help="seconds the requests may take; the run stops there and fails (default %(default)s)")
    parser.add_argument("--check-flat", type=float, default=None, metavar="MIB",
                        help="fail when the RSS grows more than this after the warm-up (default: no check)")
    parser.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="one more `encdec serve` argument, e.g. --server-arg=--max-queue=64; repeat it")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                        help="the kinds of request of the mix (default: all; a file's download comes with it)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--output", default=str(DOC),
                        help=f"the markdown file whose soak section is rewritten, or - to print it (default: {DOC})")
    args = parser.parse_args(argv)
    for name in ("requests", "clients", "every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a whole number >= 1, got {getattr(args, name)}")
    return args


def write_section(output: str, section: str) -> None:
    text = Path(output).read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{output} has no {BEGIN} ... {END} markers; add them where the section goes")
    head, rest = text.split(BEGIN, 1)
    atomic_write_text(output, f"{head}{BEGIN}\n{section}{END}{rest.split(END, 1)[1]}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    settings = SoakSettings(requests=args.requests, clients=args.clients, every=args.every, warmup=args.warmup,
                            time_limit=args.time_limit, seed=args.seed, server_args=tuple(args.server_arg),
                            kinds=tuple(dict.fromkeys(args.kinds)))
    with tempfile.TemporaryDirectory(prefix="encdec-soak-") as tmp:
        models = args.model or build_models(Path(tmp) / "models")
        result = soak(models, settings, Path(tmp))
    line, failures = verdict(result, args.check_flat)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    command = shlex.join(["python", "scripts/benchmark_soak.py", *argv])
    served = ", ".join(model.split("=")[0] for model in models) if args.model else "de-en and en-de (date models)"
    section = (f"_Measured {stamp} UTC on {cpu_model()} ({os.cpu_count()} logical cores, load "
               f"{os.getloadavg()[0]:.1f}), Python {platform.python_version()}, by `{command}`; serving "
               f"{served}._\n\n{markdown(result, line)}\n")
    if args.output == "-":
        print(section)
    else:
        write_section(args.output, section)
        print(section)
    for failure in failures:
        print(f"benchmark_soak: FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
