"""Translate a text file with CTranslate2 alone, in a process that never imports torch (run by benchmarks/corpus.py).

CTranslate2 and torch each bring an OpenMP runtime, and in one process they slow each other (benchmarks/ct2_worker.py);
`encdec translate --engine ctranslate2` imports torch, so the corpus section times this driver beside it. It reads
the export's tokenizer with `PreTrainedTokenizerFast` (which needs no torch) and decodes as `encdec translate` does:
chunks of 1,000 lines, each sorted longest first into batches of 32, the same budget (the export's
`generation_config.json` `max_new_tokens`, else twice the batch's longest source + 10), patience 2 and the length
penalty of the generation config; it writes the detokenised outputs, one per line, and prints its own seconds
(loading included) and those of the translation alone.

    python benchmarks/ct2_corpus.py EXPORT_DIR INPUT OUTPUT --beam 5 --threads 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import ctranslate2
from transformers import PreTrainedTokenizerFast


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("export_dir")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.export_dir)
    generation = json.loads(Path(args.export_dir, "generation_config.json").read_text(encoding="utf-8"))
    translator = ctranslate2.Translator(args.export_dir, device="cpu", intra_threads=args.threads)
    loaded = time.perf_counter()
    count = 0
    with open(args.input, encoding="utf-8") as source, open(args.output, "w", encoding="utf-8") as out:
        while chunk := [line.rstrip("\n") for line in itertools.islice(source, 1000)]:
            out.writelines(line + "\n" for line in translate_chunk(translator, tokenizer, chunk, args.beam, generation))
            count += len(chunk)
    if "torch" in sys.modules:
        raise SystemExit("torch was imported into the CTranslate2 driver; the timing would be wrong")
    done = time.perf_counter()
    print(json.dumps({"seconds": done - began, "translation_seconds": done - loaded, "sentences": count}))


def translate_chunk(translator: ctranslate2.Translator, tokenizer: PreTrainedTokenizerFast, lines: list[str],
                    beam: int, generation: dict) -> list[str]:
    ids = [tokenizer(line).input_ids for line in lines]
    order = sorted(range(len(lines)), key=lambda i: -len(ids[i]))
    outputs = [""] * len(lines)
    for start in range(0, len(order), 32):
        batch = order[start:start + 32]
        budget = generation.get("max_new_tokens") or 2 * len(ids[batch[0]]) + 10
        results = translator.translate_batch([tokenizer.convert_ids_to_tokens(ids[i]) for i in batch],
                                             beam_size=beam, patience=2.0, max_decoding_length=budget,
                                             length_penalty=generation.get("length_penalty", 1.0),
                                             max_input_length=0)
        for i, result in zip(batch, results, strict=True):
            tokens = tokenizer.convert_tokens_to_ids(result.hypotheses[0])
            outputs[i] = tokenizer.decode(tokens, skip_special_tokens=True).strip()
    return outputs


if __name__ == "__main__":
    main(sys.argv[1:])
