"""The shared base of the shipped sacreBLEU ``evaluate`` modules, ``bleu/bleu.py`` and ``chrf/chrf.py``.

sacreBLEU (Post 2018) scores detokenised text with its own tokenisation and reports a signature that says exactly
how a score was computed. Each metric script subclasses :class:`SacreBleuMetric`: it sets its texts (description,
citation, arguments; the base makes the class docstring of them) and reference URL, and its ``_compute`` takes that
metric's options, builds the sacreBLEU metric (``sacrebleu.metrics.BLEU``: BLEU, Papineni et al. 2002;
``sacrebleu.metrics.CHRF``: chrF, Popović 2015) and scores it with :meth:`SacreBleuMetric._corpus_score`.

``evaluate.load`` copies a metric script alone into its module cache and imports it from there, so the scripts
import this module by its absolute name (``from encdec.metrics import sacrebleu_metric``); evaluate's import scan
only checks that ``encdec`` is importable. They import the module rather than the class because ``evaluate.load``
takes the first (non-abstract) ``EvaluationModule`` subclass in the script's namespace as the metric.
"""

from __future__ import annotations

from typing import Any, ClassVar

import datasets
import evaluate

SACREBLEU_URL = "https://github.com/mjpost/sacrebleu"

_STRING = datasets.Value("string")
FEATURES = [  # several references per segment, or one
    datasets.Features({"predictions": _STRING, "references": datasets.Sequence(_STRING)}),
    datasets.Features({"predictions": _STRING, "references": _STRING}),
]


def as_reference_streams(references: list[str] | list[list[str]]) -> list[list[str]]:
    """Per-segment references -> sacreBLEU's layout: one stream per reference index, each as long as the corpus."""
    per_segment = [[r] if isinstance(r, str) else list(r) for r in references]
    counts = {len(refs) for refs in per_segment}
    if len(counts) > 1:
        raise ValueError(f"sacreBLEU needs the same number of references for every segment, got {sorted(counts)}.")
    num_refs = counts.pop() if counts else 1
    return [[refs[i] for refs in per_segment] for i in range(num_refs)]


class SacreBleuMetric(evaluate.Metric):
    """A corpus-level sacreBLEU metric; subclasses set the class attributes below and define ``_compute``.

    ``_compute`` keeps each metric's options as explicit keyword parameters, so evaluate passes them through and an
    unknown option is refused by Python (a TypeError naming ``_compute``).
    """

    DESCRIPTION: ClassVar[str]
    CITATION: ClassVar[str]
    KWARGS_DESCRIPTION: ClassVar[str]
    REFERENCE_URL: ClassVar[str]  # the paper that defines the metric

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the class docstring evaluate's own modules get from @add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
        evaluate.utils.file_utils.add_start_docstrings(cls.DESCRIPTION, cls.KWARGS_DESCRIPTION)(cls)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.DESCRIPTION,
            citation=self.CITATION,
            homepage=SACREBLEU_URL,
            inputs_description=self.KWARGS_DESCRIPTION,
            features=FEATURES,
            codebase_urls=[SACREBLEU_URL],
            reference_urls=[self.REFERENCE_URL],
        )

    @staticmethod
    def _corpus_score(
        metric: Any, predictions: list[str], references: list[str] | list[list[str]]
    ) -> tuple[Any, dict[str, Any]]:
        """Score the corpus with the sacreBLEU ``metric``: its result object and ``{"score", "signature"}``."""
        result = metric.corpus_score(list(predictions), as_reference_streams(references))
        return result, {"score": result.score, "signature": str(metric.get_signature())}
