"""BLEU (Papineni et al. 2002) through sacreBLEU (Post 2018), as an ``evaluate`` module that loads offline.

``evaluate.load("sacrebleu")`` fetches its script from the Hub; this file ships inside ``encdec`` instead:
``evaluate.load(encdec.metrics.metric_path("bleu"))``. It calls ``sacrebleu.metrics.BLEU`` directly and returns
the signature, which says exactly how the score was computed (tokenizer, case, smoothing, version).

BLEU = BP * exp(sum_n 1/4 log p_n), with BP = min(1, exp(1 - r/c)) and p_n the clipped n-gram precisions.
"""

from __future__ import annotations

import sacrebleu

# absolute, not relative: evaluate.load imports this script alone from its module cache (see sacrebleu_metric)
from encdec.metrics import sacrebleu_metric

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


class Bleu(sacrebleu_metric.SacreBleuMetric):
    DESCRIPTION, CITATION, KWARGS_DESCRIPTION = _DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION
    REFERENCE_URL = "https://aclanthology.org/W18-6319/"

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
        result, scores = self._corpus_score(bleu, predictions, references)
        return {
            **scores,
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
