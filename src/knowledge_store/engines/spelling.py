"""Typo tolerance, the same on every engine: a query's misspelt words and what they stand for.

The ``fuzzy`` list searches a query as the lexical list does, after replacing each word
that no chunk the reader can see holds with the word one edit away that most of those
chunks hold — ``replicaton`` → ``replication``. One edit: a letter deleted, inserted,
replaced, or two neighbours swapped (optimal string alignment distance 1, which is what
Tantivy's fuzzy term queries match with ``transposition_cost_one``). Only plain words of
:data:`MIN_CHARS` letters or more are corrected (a short word is one edit from too many
others; an identifier is matched as written by the lexical list).

Counting is the engine's: ``counts(words)`` says how many chunks *the reader may read*
hold each word as the index analyses it (stems: ``replications`` counts as
``replication``). Counting under the caller's ACL keeps a correction from revealing a
word that only unreadable chunks hold. Pure functions: text and counts in, words out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from knowledge_store.model.queries import WORD_PATTERN

__all__ = [
    "MAX_WORDS",
    "MIN_CHARS",
    "Correction",
    "correct",
    "corrected",
    "misspelt_candidates",
    "variants",
]

#: Words shorter than this are never corrected.
MIN_CHARS = 4
#: At most this many words of a query are looked at (a long text stays cheap).
MAX_WORDS = 16
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_WORD = re.compile(WORD_PATTERN)

#: ``counts(words)``: readable chunks holding each word (None: a word the index drops, a stop
#: word, which is never corrected; a word left out of the mapping: 0).
Counts = Callable[[Sequence[str]], Mapping[str, int | None]]


@dataclass(frozen=True)
class Correction:
    """``word`` (as written, lowercased) was searched as ``to``, which ``chunks`` chunks hold."""

    word: str
    to: str
    chunks: int


def misspelt_candidates(text: str) -> list[str]:
    """The words of ``text`` that a correction may replace: plain words (letters only) of
    :data:`MIN_CHARS` or more, lowercased, each once, at most :data:`MAX_WORDS`."""
    out: dict[str, None] = {}
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if len(word) >= MIN_CHARS and word.isalpha():
            out.setdefault(word, None)
        if len(out) == MAX_WORDS:
            break
    return list(out)


def variants(word: str) -> list[str]:
    """Every word one edit away from ``word`` (see the module docstring), sorted, without
    ``word``. Replaced and inserted letters are a–z and the word's own letters."""
    letters = sorted(set(_LETTERS) | set(word))
    found: set[str] = set()
    for i in range(len(word) + 1):
        head, tail = word[:i], word[i:]
        found.update(head + c + tail for c in letters)  # insertion
        if tail:
            found.add(head + tail[1:])  # deletion
            found.update(head + c + tail[1:] for c in letters)  # substitution
        if len(tail) > 1:
            found.add(head + tail[1] + tail[0] + tail[2:])  # transposition
    found.discard(word)
    return sorted(found)


def correct(words: Sequence[str], counts: Counts) -> list[Correction]:
    """The corrections of ``words``: each one that no readable chunk holds, replaced by the
    variant most readable chunks hold (ties: the first in alphabetical order). Two calls
    of ``counts``: the words, then the variants of those that are missing."""
    if not words:
        return []
    held = counts(list(words))
    missing = [w for w in words if w not in held or held[w] == 0]
    if not missing:
        return []
    options = {w: variants(w) for w in missing}
    seen = counts(sorted({v for vs in options.values() for v in vs}))
    out: list[Correction] = []
    for word in missing:
        best = min(options[word], key=lambda v: (-(seen.get(v) or 0), v), default=None)
        found = 0 if best is None else seen.get(best) or 0
        if best is not None and found > 0:
            out.append(Correction(word, best, found))
    return out


def corrected(text: str, corrections: Iterable[Correction]) -> str:
    """``text`` with each corrected word (whole words, in any case) replaced."""
    table = {c.word: c.to for c in corrections}
    if not table:
        return text
    return _WORD.sub(lambda m: table.get(m.group(0).lower(), m.group(0)), text)
