"""Glossaries on Multi30k: term accuracy, BLEU, chrF and speed with and without a glossary, into docs/results.md.

    python scripts/glossary_multi30k.py --model runs/multi30k-transformer-small [--source de --target en]
        [--data ../shared/data/multi30k] [--split test2016] [--num-beams 5] [--limit N] [--json out.json]

The glossaries are drawn from the references as the WMT 2021 terminology task drew its terms (Alam et al. 2021,
"Findings of the WMT Shared Task on Machine Translation Using Terminologies"): for each sentence, a source word and
the reference word it is aligned to, one-to-one, both content words (letters only, three or more, not among the 150
most frequent words of their side of the training data). The word pairs are split in two kinds:

- **missed**: the reference word is not in the model's unconstrained translation; the sentence's first such pair is
  in its glossary;
- **kept**: the reference word is in it already; the first such pair is in the glossary too (a glossary must not
  harm a term the model gets right).

The alignment of source and reference is the model's own (``encdec align``'s forced alignment on its alignment
layer). Each sentence with a glossary is translated with it (``encdec.inference.translate(..., glossary=...)``, one
sentence per call) and without it (one sentence per call, the same beam), so that the speed ratio compares like with
like; a sentence without a glossary keeps its unconstrained translation. Term accuracy is the share of glossary
terms whose target word is in the translation (whole words, case aside), as the task's exact-match accuracy.

Only the text between the ``<!-- begin: glossary -->`` and ``<!-- end: glossary -->`` markers of docs/results.md is
replaced (the row of this direction and model).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import sacrebleu
import torch

from encdec.inference import load_model_and_tokenizer, translate
from encdec.inference.alignment import (
    alignment_weights,
    default_layer,
    encode_pairs,
    teacher_forced_attention,
    word_links,
)
from encdec.io_utils import atomic_write_text
from encdec.tokenization import language_ids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi30k_results import replace_section  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
FREQUENT = 150  # the most frequent training words of each side: function words, never terms
WORD = re.compile(r"^\W*([^\W\d_]{3,})\W*$")  # a word of letters only (three or more), its punctuation aside


def core(word: str) -> str | None:
    """The letters of a content word, else None."""
    found = WORD.match(word)
    return found.group(1) if found else None


def frequent_words(path: Path) -> set[str]:
    counts = Counter(word.casefold() for line in path.read_text(encoding="utf-8").splitlines() for word in
                     re.findall(r"[^\W\d_]+", line))
    return {word for word, _ in counts.most_common(FREQUENT)}


def reference_links(model, tokenizer, sources: list[str], references: list[str], languages: dict
                    ) -> list[set[tuple[int, int]]]:
    """Each source-reference pair's word links, from the model's attention on its alignment layer."""
    layer, found = default_layer(model), []
    with torch.inference_mode():
        for source_ids, target_ids in encode_pairs(tokenizer, sources, references, *languages.values()):
            _, by_head = teacher_forced_attention(model, source_ids, target_ids)
            found.append(word_links(alignment_weights(by_head, layer), tokenizer, source_ids, target_ids))
    return found


def draw_terms(source: str, reference: str, output: str, links: set[tuple[int, int]], common: tuple[set, set]
               ) -> dict[str, tuple[str, str]]:
    """The sentence's glossary: ``{source word: (reference word, "missed" | "kept")}``, at most one of each kind."""
    sources, targets = source.split(), reference.split()
    said = {core(word).casefold() for word in output.split() if core(word)}
    by_source, by_target = Counter(i for i, _ in links), Counter(j for _, j in links)
    terms: dict[str, tuple[str, str]] = {}
    for i, j in sorted(links):
        if by_source[i] != 1 or by_target[j] != 1 or i >= len(sources) or j >= len(targets):
            continue
        term, wanted = core(sources[i]), core(targets[j])
        if not term or not wanted or term.casefold() in common[0] or wanted.casefold() in common[1]:
            continue
        kind = "kept" if wanted.casefold() in said else "missed"
        if term not in terms and kind not in {k for _, k in terms.values()}:
            terms[term] = (wanted, kind)
    return terms


def has_term(output: str, term: str) -> bool:
    return term.casefold() in {core(word).casefold() for word in output.split() if core(word)}


def timed_each(model, tokenizer, sources: list[str], glossaries: list[dict | None], beams: int, languages: dict
               ) -> tuple[list, float]:
    began, outputs = time.perf_counter(), []
    for source, glossary in zip(sources, glossaries, strict=True):
        outputs += translate(model, tokenizer, [source], num_beams=beams, glossary=glossary, **languages)
    return outputs, time.perf_counter() - began


def measure(args: argparse.Namespace) -> dict:
    model, tokenizer = load_model_and_tokenizer(args.model)
    read = lambda lang: (args.data / f"{args.split}.{lang}").read_text(encoding="utf-8").splitlines()[:args.limit]
    sources, references = read(args.source), read(args.target)
    common = (frequent_words(args.data / f"train.{args.source}"), frequent_words(args.data / f"train.{args.target}"))
    # a multilingual model is asked the direction (its source and target language tokens)
    languages = {"source_lang": args.source, "target_lang": args.target} if language_ids(tokenizer) else {}
    plain = translate(model, tokenizer, sources, num_beams=args.num_beams, **languages)
    links = reference_links(model, tokenizer, sources, references, languages)
    drawn = [draw_terms(*row, common) for row in zip(sources, references, plain, links, strict=True)]
    rows = [k for k, terms in enumerate(drawn) if terms]
    glossaries = [{term: wanted for term, (wanted, _) in drawn[k].items()} for k in rows]
    picked = [sources[k] for k in rows]
    alone, seconds_plain = timed_each(model, tokenizer, picked, [None] * len(rows), args.num_beams, languages)
    constrained, seconds_terms = timed_each(model, tokenizer, picked, glossaries, args.num_beams, languages)
    outputs = list(plain)
    for k, text in zip(rows, constrained, strict=True):
        outputs[k] = text
    return {"sources": sources, "references": references, "plain": plain, "outputs": outputs, "drawn": drawn,
            "alone": dict(zip(rows, alone, strict=True)), "seconds": (seconds_plain, seconds_terms), "rows": rows}


def accuracy(found: dict, texts: list[str], kind: str | None = None) -> tuple[float, int]:
    hits = [has_term(texts[k], wanted) for k, terms in enumerate(found["drawn"]) for wanted, which in terms.values()
            if kind in (None, which)]
    return 100 * sum(hits) / max(len(hits), 1), len(hits)


def summary(found: dict, args: argparse.Namespace) -> dict:
    refs = [found["references"]]
    scores = {}
    for name, texts in (("without", found["plain"]), ("with", found["outputs"])):
        scores[name] = {"bleu": round(sacrebleu.corpus_bleu(texts, refs).score, 2),
                        "chrf": round(sacrebleu.corpus_chrf(texts, refs).score, 2),
                        **{f"term_accuracy_{kind or 'all'}": round(accuracy(found, texts, kind)[0], 1)
                           for kind in (None, "missed", "kept")}}
    same = sum(found["alone"][k] == found["plain"][k] for k in found["rows"])
    return {"model": Path(args.model).name, "direction": f"{args.source}-{args.target}", "split": args.split,
            "sentences": len(found["sources"]), "with_terms": len(found["rows"]),
            "terms": {kind: accuracy(found, found["plain"], kind)[1] for kind in ("missed", "kept")},
            "num_beams": args.num_beams, **scores, "seconds": [round(s, 1) for s in found["seconds"]],
            "time_ratio": round(found["seconds"][1] / found["seconds"][0], 2), "batch_equals_alone": same}


def table_row(result: dict) -> str:
    w, wo = result["with"], result["without"]
    return (f"| {result['direction']} | `{result['model']}` | {result['sentences']} ({result['with_terms']} with "
            f"terms: {result['terms']['missed']} missed, {result['terms']['kept']} kept) | "
            f"{wo['term_accuracy_all']} → **{w['term_accuracy_all']}** | {wo['term_accuracy_missed']} → "
            f"{w['term_accuracy_missed']} | {wo['term_accuracy_kept']} → {w['term_accuracy_kept']} | "
            f"{wo['bleu']} → {w['bleu']} | {wo['chrf']} → {w['chrf']} | {result['time_ratio']}x |")


HEADER = ("| direction | model | sentences | term accuracy, all (%) | missed terms (%) | kept terms (%) | BLEU | "
          "chrF | time with / without |\n|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--source", default="de")
    parser.add_argument("--target", default="en")
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--num-beams", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results (and the outputs) here")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "results.md")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    found = measure(args)
    result = summary(found, args)
    print(json.dumps(result, indent=1))
    if args.json:
        atomic_write_text(args.json, json.dumps({**result, "outputs": found["outputs"], "plain": found["plain"],
                                                 "glossaries": found["drawn"]}, ensure_ascii=False, indent=1))
    text = args.output.read_text(encoding="utf-8")
    atomic_write_text(args.output, replace_section(text, "glossary", f"{HEADER}\n{table_row(result)}"))
    print(f"wrote the glossary row of {args.output}")


if __name__ == "__main__":
    main()
