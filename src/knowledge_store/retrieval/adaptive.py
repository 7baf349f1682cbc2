"""Query-adaptive fusion weights — pure functions, each choice with its reason.

One fixed weighting cannot serve both ``pg_stat_activity`` and "how do I find
out which queries are running?": BM25 is the better list for the first (an
identifier, matched as written) and the worse one for the second (a question
whose words are not the answer's words). :func:`adaptive_weights` reads the
query text (:func:`query_features`) and scales the lexical list's weight:

* a **question** (a wh-word or auxiliary first, or a ``?``) or a long
  natural-language request: lexical × ``question``;
* **identifier-like tokens** (``snake_case``, ``camelCase``, ``a.b``, ``f()``,
  ``--flag``, ``SQLITE_BUSY``): lexical × ``identifier`` (not for a question:
  an identifier inside a question is one word of many);

and returns the weights with the reasons (``--explain`` shows both). The
factors were chosen by ``bench/eval_adaptive.py`` across every shared eval set
together (docs/relevance.md has the table and the intervals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from knowledge_store.model.queries import QueryFeatures, query_features

__all__ = [
    "AdaptiveParams",
    "AdaptiveWeights",
    "QueryFeatures",
    "adaptive_weights",
    "query_features",
]


@dataclass(frozen=True)
class AdaptiveParams:
    """How much each feature scales the lexical weight (1 = no change)."""

    question: float = 0.5
    identifier: float = 1.0


@dataclass(frozen=True)
class AdaptiveWeights:
    """The weights chosen for one query, and why (for ``--explain``)."""

    weights: Mapping[str, float]
    features: QueryFeatures
    reasons: tuple[str, ...] = field(default=())

    def explain(self) -> dict[str, object]:
        return {
            "weights": dict(self.weights),
            "features": {
                "words": self.features.words,
                "question": self.features.question,
                "identifiers": list(self.features.identifiers),
            },
            "why": list(self.reasons),
        }


def adaptive_weights(
    text: str, base: Mapping[str, float], params: AdaptiveParams = AdaptiveParams()
) -> AdaptiveWeights:
    """``base`` weights with the lexical weight scaled for this query (module docstring)."""
    features = query_features(text)
    weights = dict(base)
    reasons: list[str] = []
    lexical = weights.get("lexical", 1.0)
    if features.natural_language and params.question != 1.0:
        lexical *= params.question
        form = "a question" if features.question else f"{features.words} plain words"
        reasons.append(
            f"lexical × {params.question:g}: the query is {form}; its words need not be the answer's"
        )
    elif features.identifiers and params.identifier != 1.0:
        lexical *= params.identifier
        shown = ", ".join(features.identifiers[:3])
        reasons.append(
            f"lexical × {params.identifier:g}: identifier-like tokens ({shown}) match as written"
        )
    if "lexical" in weights or reasons:
        weights["lexical"] = lexical
    if not reasons:
        reasons.append("base weights: keyword-style query without identifiers")
    return AdaptiveWeights(weights, features, tuple(reasons))
