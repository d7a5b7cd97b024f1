"""Time beam search of several CTranslate2 exports in a process that never imports torch (run by student_shapes.py).

Loads every export, tokenises the first ``--sentences`` sources with the first export's tokenizer, decodes them in
batches of 32 to exactly ``--new-tokens`` tokens with each export in turn (the order reversed every round), and
prints one JSON line: beam size -> median sentences/s per export, in the order given.

    python benchmarks/student_shapes_worker.py SOURCES EXPORT_DIR [EXPORT_DIR ...] --beams 5 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import ctranslate2
from transformers import PreTrainedTokenizerFast


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sources")
    parser.add_argument("exports", nargs="+")
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 1])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=320)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    with open(args.sources, encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(args.sentences)]
    # every export gets the same source tokens (an unknown piece is <unk> in another vocabulary: same length, same cost)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.exports[0])
    pieces = [tokenizer.convert_ids_to_tokens(tokenizer(line).input_ids) for line in lines]
    batches = [pieces[i:i + 32] for i in range(0, len(pieces), 32)]
    translators = [ctranslate2.Translator(export, device="cpu", intra_threads=args.threads) for export in args.exports]
    if "torch" in sys.modules:
        raise SystemExit("torch was imported into the CTranslate2 worker; the timings would be wrong")
    speeds = {}
    for beam in args.beams:
        seconds: list[list[float]] = [[] for _ in translators]
        for round_ in range(args.rounds):
            order = list(range(len(translators)))
            for i in order if round_ % 2 == 0 else reversed(order):
                began = time.perf_counter()
                for batch in batches:
                    translators[i].translate_batch(batch, beam_size=beam, min_decoding_length=args.new_tokens,
                                                   max_decoding_length=args.new_tokens, max_input_length=0)
                seconds[i].append(time.perf_counter() - began)
        speeds[str(beam)] = [round(len(lines) / statistics.median(times), 2) for times in seconds]
    print(json.dumps(speeds))


if __name__ == "__main__":
    main(sys.argv[1:])
