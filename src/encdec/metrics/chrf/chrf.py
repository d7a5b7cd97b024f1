"""chrF (Popović 2015) and chrF++ (Popović 2017) through sacreBLEU, as an ``evaluate`` module that loads offline.

Load it with ``evaluate.load(encdec.metrics.metric_path("chrf"))``; it calls ``sacrebleu.metrics.CHRF`` directly
and returns sacreBLEU's signature with the score.

chrF_beta = (1 + beta^2) * chrP * chrR / (beta^2 * chrP + chrR), over character n-grams of order 1..6
(and word n-grams of order 1..``word_order`` for chrF++); beta = 2 weights recall twice as much as precision.
"""

from __future__ import annotations

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
}
"""

_DESCRIPTION = """\
Corpus-level chrF (character n-gram F-score) computed by sacreBLEU, with its reproducibility signature.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of str, one system output per segment.
    references: list of str (one reference per segment) or list of lists of str (the same number per segment).
    char_order: largest character n-gram order (default 6).
    word_order: largest word n-gram order (default 0: chrF; 2: chrF++).
    beta: weight of recall relative to precision (default 2).
    lowercase: lowercase both sides before scoring.
    whitespace: keep whitespace when extracting character n-grams.
    eps_smoothing: the smoothing of the official chrF++.py / NLTK implementations instead of sacreBLEU's default.
Returns:
    score: chrF in [0, 100]; signature: sacreBLEU's signature string; char_order, word_order, beta: the settings.
Examples:
    >>> chrf = evaluate.load(encdec.metrics.metric_path("chrf"))
    >>> chrf.compute(predictions=["the cat sat on the mat"], references=["the cat sat on the mat"])["score"]
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
class Chrf(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacrebleu",
            inputs_description=_KWARGS_DESCRIPTION,
            features=_FEATURES,
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W15-3049/"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[str] | list[list[str]],
        char_order: int = 6,
        word_order: int = 0,
        beta: int = 2,
        lowercase: bool = False,
        whitespace: bool = False,
        eps_smoothing: bool = False,
    ) -> dict:
        chrf = sacrebleu.metrics.CHRF(char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase,
                                      whitespace=whitespace, eps_smoothing=eps_smoothing)
        result = chrf.corpus_score(list(predictions), as_reference_streams(references))
        return {
            "score": result.score,
            "signature": str(chrf.get_signature()),
            "char_order": char_order,
            "word_order": word_order,
            "beta": beta,
        }
