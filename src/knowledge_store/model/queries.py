"""What a query's text says about itself: its words, whether it is a question, its identifiers;
and the two English stop lists of the lexical analysis.

Read by fusion (``retrieval.adaptive``: the lexical list's weight) and by both engines'
lexical analysis (no index holds a :data:`STOP_WORDS` word; a natural-language query's
:data:`FUNCTION_WORDS` are no query terms), so one definition serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "FUNCTION_WORDS",
    "STOP_WORDS",
    "WORD_PATTERN",
    "QueryFeatures",
    "QueryTerms",
    "TextAnalysis",
    "query_features",
    "unsearched_words",
]

_WORD = re.compile(r"[^\s]+")
_LETTERS = re.compile(r"[A-Za-z]")
#: Words that open a question or a request for help.
_QUESTION_OPENERS = frozenset(
    (
        *("what", "whats", "what's", "which", "who", "whom", "whose", "when", "where", "why"),
        *("how", "can", "could", "should", "would", "will", "shall", "do", "does", "did"),
        *("is", "are", "was", "were", "am", "has", "have", "had", "may", "might", "must"),
        *("i", "i'm", "i’m", "im", "my"),
    )
)
_IDENTIFIER = re.compile(
    r"""(?x)
      _*[A-Za-z0-9]+_[A-Za-z0-9_]*      # snake_case, SQLITE_BUSY, _PG_init
    | [a-z]+[A-Z][A-Za-z0-9]*           # camelCase
    | [A-Za-z_][\w$]*\.[A-Za-z_][\w.]*  # a.b (schema.table, http.postBuffer)
    | [A-Za-z_]\w*\(\)?                 # f() / f(
    | --?[A-Za-z][\w-]*                 # --flag, -v
    | \$\w+                             # $libdir
    | [A-Z]{2,}[0-9]*                   # ALL-CAPS words: PRAGMA, SQLITE
    """
)


@dataclass(frozen=True)
class QueryFeatures:
    """What the query text says about the lists that will serve it best."""

    words: int
    question: bool
    identifiers: tuple[str, ...]

    @property
    def natural_language(self) -> bool:
        """A question, or a request of many words, few of them identifiers."""
        return self.question or (self.words >= 6 and 3 * len(self.identifiers) <= self.words)


def query_features(text: str) -> QueryFeatures:
    """Word count, question form, and the identifier-like tokens of ``text``."""
    words = [w for w in _WORD.findall(text) if _LETTERS.search(w)]
    first = words[0].strip("\"'(") if words else ""
    # An all-caps first word is a keyword (IS DISTINCT FROM), not a question opener.
    opener = first.lower() in _QUESTION_OPENERS and not (len(first) > 1 and first.isupper())
    question = text.rstrip().endswith("?") or (opener and len(words) >= 3)
    identifiers = tuple(
        w for w in (t.strip("\"'`,;:!?") for t in words) if w and _IDENTIFIER.fullmatch(w)
    )
    return QueryFeatures(len(words), question, identifiers)


#: The words a natural-language query is not searched by: Snowball's English stop list, the
#: one PostgreSQL's ``english`` text search configuration drops (``tsearch_data/english.stop``).
#: "how do I list all tables?" is searched by ``list`` and ``tables``; ``all`` or ``between`` as
#: an index term — a keyword query — is still searched for (docs/relevance.md §9).
FUNCTION_WORDS: tuple[str, ...] = (
    *("i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours"),
    *("yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers"),
    *("herself", "it", "its", "itself", "they", "them", "their", "theirs", "themselves"),
    *("what", "which", "who", "whom", "this", "that", "these", "those", "am", "is", "are"),
    *("was", "were", "be", "been", "being", "have", "has", "had", "having", "do", "does"),
    *("did", "doing", "a", "an", "the", "and", "but", "if", "or", "because", "as", "until"),
    *("while", "of", "at", "by", "for", "with", "about", "against", "between", "into"),
    *("through", "during", "before", "after", "above", "below", "to", "from", "up", "down"),
    *("in", "out", "on", "off", "over", "under", "again", "further", "then", "once", "here"),
    *("there", "when", "where", "why", "how", "all", "any", "both", "each", "few", "more"),
    *("most", "other", "some", "such", "no", "nor", "not", "only", "own", "same", "so"),
    *("than", "too", "very", "s", "t", "can", "will", "just", "don", "should", "now"),
)


#: The words no lexical index holds, in documents and queries alike: Lucene's English stop
#: list — the 33 words of Tantivy's ``english`` stop filter, which the embedded engine's word
#: analyzer applies (a test checks the two agree word for word) and PostgreSQL's ``ks_tsv``
#: removes before stemming. A subset of :data:`FUNCTION_WORDS`.
STOP_WORDS: tuple[str, ...] = (
    *("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into"),
    *("is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then"),
    *("there", "these", "they", "this", "to", "was", "will", "with"),
)

#: What the lexical analysis calls a word (before stop words and stemming): a run of letters,
#: digits and ``_`` — the embedded engine's Tantivy tokenizer, and :func:`unsearched_words`.
WORD_PATTERN = r"\w+"
_PLAIN_WORD = re.compile(WORD_PATTERN)
_STOP = frozenset(STOP_WORDS)
_QUESTION_STOP = _STOP | frozenset(FUNCTION_WORDS)


def unsearched_words(text: str) -> tuple[str, ...] | None:
    """The words of ``text`` when the lexical analysis drops every one of them (stop words;
    a question's function words too), so BM25 has nothing to look for; else None."""
    words = _PLAIN_WORD.findall(text.lower())
    dropped = _QUESTION_STOP if query_features(text).natural_language else _STOP
    if words and all(w in dropped for w in words):
        return tuple(dict.fromkeys(words))
    return None


@dataclass(frozen=True)
class QueryTerms:
    """A query text as a store's lexical index matches it: ``words`` (lowercased, stop words
    out, stemmed) on the word fields, ``idents`` (identifiers as written, lowercased, that
    are not plain words) on the identifier field."""

    words: tuple[str, ...]
    idents: tuple[str, ...]


class TextAnalysis(Protocol):
    """How a store's lexical index reads text: a query's terms, and where a text holds
    them (the search page highlights those spans). Each engine gives its own
    (``KnowledgeStore.text_analysis``): the surfaces never import an engine module."""

    def query_terms(self, text: str) -> QueryTerms: ...

    def matches(self, text: str, terms: QueryTerms) -> list[tuple[int, int, str]]:
        """``(start, end, term)`` of each token of ``text`` one of ``terms`` matches, in order."""
        ...
