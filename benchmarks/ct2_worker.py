"""Time CTranslate2's translate_batch in a process that never imports torch (run by benchmarks/engines.py).

CTranslate2 and torch each bring an OpenMP runtime; in one process they slow each other down (about 2x), so every
CTranslate2 model of the benchmark lives in its own worker. It loads one model, then answers each request line on
stdin, ``{"beam": 5, "calls": 1}``, by timing that many calls and printing their seconds as one JSON line.

    python benchmarks/ct2_worker.py MODEL_DIR TOKENS_JSON --compute-type float32 --threads 1 --new-tokens 32
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ctranslate2


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("tokens", help="JSON file: a list of source token lists (one batch)")
    parser.add_argument("--compute-type", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, required=True, help="exactly this many tokens per sentence")
    args = parser.parse_args(argv)
    if "torch" in sys.modules:
        raise SystemExit("torch was imported into the CTranslate2 worker; the timings would be wrong")
    with open(args.tokens, encoding="utf-8") as f:
        batch = json.load(f)
    translator = ctranslate2.Translator(args.model_dir, device="cpu", compute_type=args.compute_type,
                                        intra_threads=args.threads, inter_threads=1)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        times = []
        for _ in range(request["calls"]):
            start = time.perf_counter()
            results = translator.translate_batch(batch, beam_size=request["beam"], min_decoding_length=args.new_tokens,
                                                 max_decoding_length=args.new_tokens, max_input_length=0)
            times.append(time.perf_counter() - start)
            lengths = {len(result.hypotheses[0]) for result in results}
            if lengths != {args.new_tokens}:
                raise SystemExit(f"CTranslate2 generated {sorted(lengths)} tokens, not {args.new_tokens}")
        print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
