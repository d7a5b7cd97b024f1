"""Markup on Multi30k: well-formedness, placement of the tags, BLEU, chrF and speed of tagged translation, into
docs/results.md.

    python scripts/markup_multi30k.py --model runs/multi30k-multilingual/multilingual --out runs/markup
        [--source de --target en] [--data ../shared/data/multi30k] [--split test2016] [--sentences 300] [--seed 0]
        [--alignment-layer N] [--tagged runs/markup/markup-test2016-de-en.jsonl]

**The tagged set.** A tag can only be said to be in the right place around a word whose translation is known. Here
it is known by a bilingual dictionary drawn from the training data alone, then confirmed by the sentence's reference:

- the dictionary pairs a source word and a target word that are each other's best match by the Dice coefficient of
  their sentence co-occurrence in the training pairs (Dice 1945; as Smadja et al. 1996 drew translation lexicons),
  at least 0.5 and in at least five pairs, neither among the 150 most frequent words of its side (function words:
  "der" has no one translation); words are letters only, three or more, case aside (``glossary_multi30k.core``);
- a test sentence's source word is known when it occurs once in the source and its dictionary translation occurs
  once in the reference.

Neither step uses the model, so the tags are not graded by the attention that puts them back (the forced alignment
of the reference would be that same attention), and the set is the same for every model. Of the sentences with a
known word, ``--sentences`` are drawn (seeded); in each, one to three known words are wrapped in tags of distinct
names drawn from ``<b>``, ``<i>``, ``<a href="...">``, ``<span class="x">``, so each element is found again by its
start tag. Known words next to each other go into one element with a second one nested around one of them; a
quarter of the sentences with a name to spare wrap one element in another (nesting over the same word); half get a
void ``<br/>`` or ``<img .../>`` between two words. The set is written to ``--out``
(``markup-SPLIT-SRC-TGT.jsonl``: each sentence's source, reference, tagged text and elements with their expected
target words) and ``--tagged`` reads such a file back instead of drawing one.

**What is measured.** Each tagged sentence is translated with ``encdec.inference.tagged.translate_tagged`` and its
source without tags with ``encdec.inference.translate``, both in batches of 32 with the model's default beam (each
batch untagged, then tagged, so that the machine's load falls on both), on the model's alignment layer or
``--alignment-layer``:

- **well-formed**: the output parses as XML inside a root element (every tag closed, in order), ``encdec.markup``
  reads it back, and it holds the same tags as the input;
- **placement**, over the elements whose expected words all occur in the output (the model may translate a word
  otherwise; those elements are counted apart): *inside*, each expected word has an occurrence within the element;
  *placed*, inside and the element holds at most one word more than its expected words (a word of a two-word
  translation or an article: "police officer" for *Polizist*, "the sand" for *im Sand*); *exact*, inside and no
  other word;
- **text**: the output without its tags against the untagged translation (sentences equal; BLEU and chrF of both
  against the references, sacreBLEU).

Only the text between the ``<!-- begin: markup -->`` and ``<!-- end: markup -->`` markers of docs/results.md is
replaced (the row of this direction and alignment layer).
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import sacrebleu
import torch

from encdec.inference import load_model_and_tokenizer, translate
from encdec.inference.alignment import default_layer
from encdec.inference.tagged import translate_tagged
from encdec.io_utils import atomic_write_text
from encdec.markup import Element, MarkupError, read_markup
from encdec.tokenization import language_ids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from glossary_multi30k import core, frequent_words  # noqa: E402
from multi30k_results import replace_section  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
MIN_DICE, MIN_PAIRS = 0.5, 5  # a dictionary entry: each other's best match, this strong, seen this often
EXTRA = 1  # words an element may hold beyond its expected ones and still be "placed"
CHUNK = 32  # sentences translated at once (``translate``'s batch), untagged then tagged
TAGS = ("b", "i", "a", "span")
START = {"b": "<b>", "i": "<i>", "a": '<a href="https://example.com/">', "span": '<span class="x">'}
VOIDS = ("<br/>", '<img src="figure.png" alt=""/>')
TAG = re.compile(r"<[^>]*>")
EDGES = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)  # a word's leading punctuation, its letters, its trailing punctuation


def key(word: str) -> str | None:
    """A word as the dictionary reads it: its letters, case aside; None for no content word."""
    found = core(word)
    return found.casefold() if found else None


def dictionary(source_path: Path, target_path: Path) -> dict[str, str]:
    """``{source word: target word}``: mutual best matches by the Dice coefficient of sentence co-occurrence."""
    common = frequent_words(source_path) | frequent_words(target_path)
    seen_source, seen_target, seen_both = Counter(), Counter(), Counter()
    lines = zip(source_path.read_text(encoding="utf-8").splitlines(),
                target_path.read_text(encoding="utf-8").splitlines(), strict=True)
    for source, target in lines:
        words = ({k for w in source.split() if (k := key(w))} - common, {k for w in target.split() if (k := key(w))}
                 - common)
        seen_source.update(words[0])
        seen_target.update(words[1])
        seen_both.update((s, t) for s in words[0] for t in words[1])
    best_target: dict[str, tuple[float, str]] = {}
    best_source: dict[str, tuple[float, str]] = {}
    for (s, t), both in seen_both.items():
        if both >= MIN_PAIRS:
            dice = 2 * both / (seen_source[s] + seen_target[t])
            best_target[s] = max(best_target.get(s, (0.0, "")), (dice, t))
            best_source[t] = max(best_source.get(t, (0.0, "")), (dice, s))
    return {s: t for s, (dice, t) in sorted(best_target.items()) if dice >= MIN_DICE and best_source[t][1] == s}


def known_words(source: str, reference: str, lexicon: dict[str, str]) -> dict[int, str]:
    """``{source word index: its translation}`` for the words occurring once whose entry occurs once in the
    reference."""
    keys = [key(word) for word in source.split()]
    said = Counter(key(word) for word in reference.split())
    return {i: lexicon[k] for i, k in enumerate(keys) if k in lexicon and keys.count(k) == 1 and said[lexicon[k]] == 1}


def draw_spans(known: dict[int, str], rng: random.Random) -> list[tuple[int, int, str]]:
    """The elements of a sentence as (first word, last word, tag name), an outer one before those it holds."""
    picks = sorted(rng.sample(sorted(known), rng.randint(1, min(3, len(known)))))
    groups: list[list[int]] = []
    for i in picks:  # known words next to each other go into one element
        if groups and groups[-1][-1] == i - 1:
            groups[-1].append(i)
        else:
            groups.append([i])
    names, spans = rng.sample(TAGS, len(TAGS)), []
    for group in groups:
        spans.append((group[0], group[-1], names.pop()))
        if len(group) > 1:  # and one of them into a second element inside it
            word = rng.choice(group)
            spans.append((word, word, names.pop()))
    if names and rng.random() < 0.25:  # an element wrapped in another over the same words
        inner = rng.choice(spans)
        spans.insert(spans.index(inner), (inner[0], inner[1], names.pop()))
    return spans


def render(words: list[str], spans: list[tuple[int, int, str]], void: tuple[int, str] | None) -> str:
    """The sentence with its elements around the letters of their words (punctuation outside) and the void
    element, if any, before its word."""
    order = sorted(range(len(spans)), key=lambda n: (spans[n][0], -spans[n][1], n))  # outer elements open first
    out = []
    for i, word in enumerate(words):
        lead, body, trail = (html.escape(part, quote=False) for part in EDGES.match(word).groups())
        opens = "".join(START[spans[n][2]] for n in order if spans[n][0] == i)
        closes = "".join(f"</{spans[n][2]}>" for n in reversed(order) if spans[n][1] == i)
        out.append((void[1] if void and void[0] == i else "") + lead + opens + body + closes + trail)
    return " ".join(out)


def draw_set(args: argparse.Namespace) -> tuple[list[dict], dict[str, str]]:
    """The tagged set (see the module docstring): per sentence, its source, reference, tagged text and elements;
    and the dictionary it was drawn with."""
    read = lambda lang: (args.data / f"{args.split}.{lang}").read_text(encoding="utf-8").splitlines()
    lexicon = dictionary(args.data / f"train.{args.source}", args.data / f"train.{args.target}")
    rows = [(k, s, r, known_words(s, r, lexicon)) for k, (s, r) in enumerate(zip(read(args.source),
                                                                                  read(args.target), strict=True))]
    rows = [row for row in rows if row[3]]
    rng = random.Random(args.seed)
    drawn = sorted(rng.sample(rows, min(args.sentences, len(rows))))
    tagged = []
    for k, source, reference, known in drawn:
        words, spans = source.split(), draw_spans(known, rng)
        void = (rng.randrange(1, len(words)), rng.choice(VOIDS)) if len(words) > 1 and rng.random() < 0.5 else None
        text = render(words, spans, void)
        if read_markup(text).text.split() != words:
            raise SystemExit(f"sentence {k}: the tagged text {text!r} does not read back as its source")
        elements = [{"tag": START[name], "words": list(range(first, last + 1)),
                     "expected": [known[i] for i in range(first, last + 1)]} for first, last, name in spans]
        tagged.append({"index": k, "source": source, "reference": reference, "tagged": text, "elements": elements,
                       "void": void[1] if void else None, "nested": nested(spans)})
    return tagged, lexicon


def nested(spans: list[tuple[int, int, str]]) -> bool:
    """Whether an element holds another (``draw_spans`` puts an outer one before those it holds)."""
    return any(a[0] <= b[0] <= b[1] <= a[1] for n, a in enumerate(spans) for b in spans[n + 1:])


def enclosed(root: Element) -> dict[str, set[int]]:
    """``{start tag: the output words it encloses}`` of every element that is not a void one."""
    found = {}
    for child in root.children:
        if not child.atomic:
            found[child.start] = child.all_words()
            found.update(enclosed(child))
    return found


def well_formed(tagged: str, output: str) -> bool:
    """XML inside a root element (every tag closed, in order), read back by ``encdec.markup``, the same tags."""
    try:
        ET.fromstring(f"<r>{output}</r>")
        read_markup(output)
    except (ET.ParseError, MarkupError):
        return False
    return sorted(TAG.findall(output)) == sorted(TAG.findall(tagged))


def plain_text(output: str) -> str:
    """The output without its tags, its words joined by single spaces."""
    try:
        return " ".join(read_markup(output).text.split())
    except MarkupError:
        return " ".join(html.unescape(TAG.sub(" ", output)).split())


def placement(element: dict, words: list[str], inside: set[int]) -> dict | None:
    """Whether the element's expected words are inside it, with at most ``EXTRA`` others or none; None where one of
    them is not in the output at all (the model translated the word otherwise)."""
    keys = [key(word) for word in words]
    if any(wanted not in keys for wanted in element["expected"]):
        return None
    hit = all(any(keys[j] == wanted for j in inside) for wanted in element["expected"])
    extra = len(inside) - len(element["expected"])
    return {"inside": hit, "placed": hit and extra <= EXTRA, "exact": hit and extra == 0}


def measure(args: argparse.Namespace, rows: list[dict]) -> dict:
    """Each sentence translated with its tags and without them (its source), in chunks of ``CHUNK`` sentences, each
    chunk untagged then tagged, so that a change in the machine's load falls on both."""
    model, tokenizer = load_model_and_tokenizer(args.model)
    # a multilingual model is asked the direction (its source and target language tokens)
    languages = {"source_lang": args.source, "target_lang": args.target} if language_ids(tokenizer) else {}
    # another layer than the model's is asked as `encdec translate --alignments --alignment-layer` asks it
    layer = {} if args.alignment_layer is None else {"alignments": True, "alignment_layer": args.alignment_layer}
    translate_tagged(model, tokenizer, [row["tagged"] for row in rows[:4]], **languages, **layer)  # warm up
    plain, outputs, seconds = [], [], [0.0, 0.0]
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        began = time.perf_counter()
        plain += translate(model, tokenizer, [row["source"] for row in chunk], batch_size=CHUNK, **languages)
        seconds[0] += time.perf_counter() - began
        began = time.perf_counter()
        outputs += translate_tagged(model, tokenizer, [row["tagged"] for row in chunk], batch_size=CHUNK,
                                    **languages, **layer)
        seconds[1] += time.perf_counter() - began
    return {"plain": plain, "outputs": outputs, "seconds": tuple(seconds),
            "layer": f"layer {args.alignment_layer}" if layer else f"layer {default_layer(model)} (the model's)"}


def score(rows: list[dict], found: dict) -> tuple[Counter, list[dict]]:
    """Counts of sentences and elements by outcome, and the elements not placed (for reading)."""
    counts, misses = Counter(), []
    for row, plain, output in zip(rows, found["plain"], found["outputs"], strict=True):
        counts["well_formed"] += well_formed(row["tagged"], output)
        counts["text_equal"] += plain_text(output) == " ".join(plain.split())
        counts["nested"] += row["nested"]
        counts["voids"] += row["void"] is not None
        counts["void_kept"] += row["void"] is not None and output.count(row["void"]) == 1
        try:
            marked = read_markup(output)
            words, spans = marked.text.split(), enclosed(marked.root)
        except MarkupError:
            words, spans = plain.split(), {}
        for element in row["elements"]:
            counts["elements"] += 1
            inside = spans.get(element["tag"], set())
            verdict = placement(element, words, inside)
            if verdict is None:
                continue
            counts["scored"] += 1
            counts["empty"] += not inside
            counts.update(name for name, good in verdict.items() if good)
            if not verdict["placed"]:
                misses.append({"index": row["index"], "tagged": row["tagged"], "output": output, "tag": element["tag"],
                               "expected": element["expected"], "enclosed": [words[j] for j in sorted(inside)]})
    return counts, misses


def summary(rows: list[dict], found: dict, counts: Counter, args: argparse.Namespace) -> dict:
    refs = [[row["reference"] for row in rows]]
    stripped = [plain_text(output) for output in found["outputs"]]
    share = lambda part, whole: round(100 * part / max(whole, 1), 1)
    seconds_plain, seconds_tagged = found["seconds"]
    return {
        "model": Path(args.model).name, "direction": f"{args.source}-{args.target}", "split": args.split,
        "alignment": found["layer"],
        "sentences": len(rows), "elements": counts["elements"], "scored": counts["scored"],
        "scored_left_empty": counts["empty"],
        "nested": counts["nested"], "voids": counts["voids"], "voids_kept": counts["void_kept"],
        "well_formed": share(counts["well_formed"], len(rows)), "text_equal": counts["text_equal"],
        **{name: share(counts[name], counts["scored"]) for name in ("placed", "inside", "exact")},
        "bleu": {"untagged": round(sacrebleu.corpus_bleu(found["plain"], refs).score, 2),
                 "tagged": round(sacrebleu.corpus_bleu(stripped, refs).score, 2)},
        "chrf": {"untagged": round(sacrebleu.corpus_chrf(found["plain"], refs).score, 2),
                 "tagged": round(sacrebleu.corpus_chrf(stripped, refs).score, 2)},
        "ms_per_sentence": {"untagged": round(1000 * seconds_plain / len(rows), 1),
                            "tagged": round(1000 * seconds_tagged / len(rows), 1)},
        "time_ratio": round(seconds_tagged / seconds_plain, 2), "seed": args.seed}


def table_row(result: dict) -> str:
    bleu, chrf, ms = result["bleu"], result["chrf"], result["ms_per_sentence"]
    return (f"| {result['direction']}, {result['alignment']} | `{result['model']}` | {result['sentences']} "
            f"({result['elements']} elements, "
            f"{result['scored']} scored; {result['nested']} nested, {result['voids']} void) | "
            f"{result['well_formed']} | **{result['placed']}** | {result['inside']} | {result['exact']} | "
            f"{result['text_equal']} / {result['sentences']} | {bleu['untagged']} → {bleu['tagged']} | "
            f"{chrf['untagged']} → {chrf['tagged']} | {result['time_ratio']:.2f}x ({ms['untagged']} → "
            f"{ms['tagged']} ms) |")


HEADER = ("| direction, alignment | model | sentences | well-formed (%) | placed (%) | inside (%) | exact (%) | "
          "text as untagged | BLEU untagged → tagged | chrF untagged → tagged | time tagged / untagged |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def write_outputs(args: argparse.Namespace, rows: list[dict], lexicon: dict | None, found: dict, result: dict,
                  misses: list[dict]) -> None:
    """The tagged set (to reproduce the figures), the dictionary it was drawn with, and the outputs and misses."""
    name = f"markup-{args.split}-{args.source}-{args.target}"
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.tagged:
        atomic_write_text(args.out / f"{name}.jsonl", "".join(json.dumps(row, ensure_ascii=False) + "\n"
                                                              for row in rows))
    if lexicon is not None:
        atomic_write_text(args.out / f"dictionary-{args.source}-{args.target}.tsv",
                          "".join(f"{s}\t{t}\n" for s, t in lexicon.items()))
    layer = "" if args.alignment_layer is None else f"-layer-{args.alignment_layer}"
    atomic_write_text(args.out / f"{name}{layer}.json", json.dumps(
        {**result, "outputs": found["outputs"], "plain": found["plain"], "misses": misses}, ensure_ascii=False,
        indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder for the tagged set, outputs and misses")
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--source", default="de")
    parser.add_argument("--target", default="en")
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--sentences", type=int, default=300, help="sentences drawn from those with a known word")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alignment-layer", type=lambda value: value if value == "mean" else int(value),
                        default=None, help="the decoder layer to align with (default: the model's)")
    parser.add_argument("--tagged", type=Path, default=None, help="a tagged set this script wrote, read back")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "results.md")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    replace_section(args.output.read_text(encoding="utf-8"), "markup", HEADER)  # no markers: say so before the run
    if args.tagged:
        rows, lexicon = [json.loads(line) for line in args.tagged.read_text(encoding="utf-8").splitlines()], None
    else:
        rows, lexicon = draw_set(args)
    found = measure(args, rows)
    counts, misses = score(rows, found)
    result = summary(rows, found, counts, args)
    print(json.dumps(result, indent=1))
    write_outputs(args, rows, lexicon, found, result, misses)
    text = args.output.read_text(encoding="utf-8")
    atomic_write_text(args.output, replace_section(text, "markup", f"{HEADER}\n{table_row(result)}"))
    print(f"wrote the markup row of {args.output}; the set, outputs and misses in {args.out}")


if __name__ == "__main__":
    main()
