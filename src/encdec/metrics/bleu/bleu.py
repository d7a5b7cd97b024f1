"""BLEU (Papineni et al. 2002) through sacreBLEU (Post 2018), as an ``evaluate`` module that loads offline.

``evaluate.load("sacrebleu")`` fetches its script from the Hub; this file ships inside ``encdec`` instead:
``evaluate.load(encdec.metrics.metric_path("bleu"))``. It calls ``sacrebleu.metrics.BLEU`` directly and returns
the signature, which says exactly how the score was computed (tokenizer, case, smoothing, version).

BLEU = BP * exp(sum_n 1/4 log p_n), with BP = min(1, exp(1 - r/c)) and p_n the clipped n-gram precisions.
"""

from __future__ import annotations

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus-level BLEU computed by sacreBLEU on detokenised text, with its reproducibility signature.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of str, one system output per segment (detokenised).
    references: list of str (one reference per segment) or list of lists of str (several references per
        segment; every segment must have the same number).
    lowercase: lowercase both sides before scoring (default False: cased BLEU).
    tokenize: sacreBLEU tokenizer ("13a", the WMT default, "intl", "char", "none", ...). None: sacreBLEU's default.
    smooth_method: "exp" (default), "floor", "add-k" or "none".
    smooth_value: the value for "floor" / "add-k" smoothing (None: sacreBLEU's default).
    use_effective_order: ignore n-gram orders with no match (for sentence-level scores).
Returns:
    score: BLEU in [0, 100]; signature: sacreBLEU's signature string; counts, totals: matched and total n-grams
    per order; precisions: p_1..p_4 in percent; bp: brevity penalty; sys_len, ref_len: lengths in tokens.
Examples:
    >>> bleu = evaluate.load(encdec.metrics.metric_path("bleu"))
    >>> bleu.compute(predictions=["the cat sat on the mat"], references=["the cat sat on the mat"])["score"]
    100.0
"""


# Each evaluate module is copied alone into evaluate's module cache, so this helper is repeated in bleu.py and
# chrf.py rather than shared through an import.
def as_reference_streams(references: list[str] | list[list[str]]) -> list[list[str]]:
    """Per-segment references -> sacreBLEU's layout: one stream per reference index, each as long as the corpus."""
    per_segment = [[r] if isinstance(r, str) else list(r) for r in references]
    counts = {len(refs) for refs in per_segment}
    if len(counts) > 1:
        raise ValueError(f"sacreBLEU needs the same number of references for every segment, got {sorted(counts)}.")
    num_refs = counts.pop() if counts else 1
    return [[refs[i] for refs in per_segment] for i in range(num_refs)]


_STRING = datasets.Value("string")
_FEATURES = [  # several references per segment, or one
    datasets.Features({"predictions": _STRING, "references": datasets.Sequence(_STRING)}),
    datasets.Features({"predictions": _STRING, "references": _STRING}),
]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Bleu(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacrebleu",
            inputs_description=_KWARGS_DESCRIPTION,
            features=_FEATURES,
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W18-6319/"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[str] | list[list[str]],
        lowercase: bool = False,
        tokenize: str | None = None,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        use_effective_order: bool = False,
    ) -> dict:
        bleu = sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize=tokenize, smooth_method=smooth_method,
                                      smooth_value=smooth_value, effective_order=use_effective_order)
        result = bleu.corpus_score(list(predictions), as_reference_streams(references))
        return {
            "score": result.score,
            "signature": str(bleu.get_signature()),
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
