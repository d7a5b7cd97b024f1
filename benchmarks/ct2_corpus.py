"""Translate a text file with CTranslate2 alone, in a process that never imports torch (run by benchmarks/corpus.py).

CTranslate2 and torch each bring an OpenMP runtime, and in one process they slow each other (benchmarks/ct2_worker.py);
`encdec translate --engine ctranslate2` imports torch, so the corpus section times this driver beside it. It reads
the export's tokenizer with `PreTrainedTokenizerFast` (which needs no torch), translates with
`Translator.translate_iterable` (batches of 32 sentences, sorted by length within blocks, as encdec does per chunk)
and writes the detokenised outputs, one per line; it prints its own seconds.

    python benchmarks/ct2_corpus.py EXPORT_DIR INPUT OUTPUT --beam 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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
    translator = ctranslate2.Translator(args.export_dir, device="cpu", intra_threads=args.threads)
    with open(args.input, encoding="utf-8") as f:
        sources = [tokenizer.convert_ids_to_tokens(tokenizer(line.rstrip("\n")).input_ids) for line in f]
    results = translator.translate_iterable(iter(sources), max_batch_size=32, batch_type="examples",
                                            beam_size=args.beam, patience=2.0, max_input_length=0)
    with open(args.output, "w", encoding="utf-8") as out:
        for result in results:
            ids = tokenizer.convert_tokens_to_ids(result.hypotheses[0])
            out.write(tokenizer.decode(ids, skip_special_tokens=True).strip() + "\n")
    if "torch" in sys.modules:
        raise SystemExit("torch was imported into the CTranslate2 driver; the timing would be wrong")
    print(json.dumps({"seconds": time.perf_counter() - began, "sentences": len(sources)}))


if __name__ == "__main__":
    main(sys.argv[1:])
