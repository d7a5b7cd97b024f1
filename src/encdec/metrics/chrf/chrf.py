"""chrF (Popović 2015) and chrF++ (Popović 2017) through sacreBLEU, as an ``evaluate`` module that loads offline.

Load it with ``evaluate.load(encdec.metrics.metric_path("chrf"))``; it calls ``sacrebleu.metrics.CHRF`` directly
and returns sacreBLEU's signature with the score.

chrF_beta = (1 + beta^2) * chrP * chrR / (beta^2 * chrP + chrR), over character n-grams of order 1..6
(and word n-grams of order 1..``word_order`` for chrF++); beta = 2 weights recall twice as much as precision.
"""

from __future__ import annotations

import sacrebleu

# absolute, not relative: evaluate.load imports this script alone from its module cache (see sacrebleu_metric)
from encdec.metrics import sacrebleu_metric

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


class Chrf(sacrebleu_metric.SacreBleuMetric):
    DESCRIPTION, CITATION, KWARGS_DESCRIPTION = _DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION
    REFERENCE_URL = "https://aclanthology.org/W15-3049/"

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
        _, scores = self._corpus_score(chrf, predictions, references)
        return {**scores, "char_order": char_order, "word_order": word_order, "beta": beta}
