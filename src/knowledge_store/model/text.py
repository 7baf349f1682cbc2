"""What can be stored as text: names, principals, dates.

Every record, request and engine reads these rules from here: a uid or a
type is a *name* (:func:`name_problem`), a title or a body is *text*
(:func:`text_problem`), and every stored date has one form
(:data:`TIMESTAMP_FORM`, made by :func:`normalize_timestamp`).
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, date, datetime, time

from knowledge_store.errors import InvalidRequest
from knowledge_store.model.vocabulary import EVERYONE, MAX_DATE_CHARS, MAX_PRINCIPAL_ID_CHARS

__all__ = [
    "PRINCIPAL_PATTERN",
    "TIMESTAMP_FORM",
    "check_membership",
    "check_principal",
    "format_timestamp",
    "name_problem",
    "normalize_timestamp",
    "printable",
    "stored_timestamp",
    "text_problem",
]

#: Characters a name (uid, type, source, status, principal id, attribute key) may not
#: hold: controls, invisible format characters, line/paragraph separators, surrogates.
_NOT_IN_NAMES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with every lone surrogate written as an escape, so that it can always be
    written out as UTF-8 — the one way the store shows text that is not Unicode:

    - a byte of a file name that is not UTF-8 (Python reads it as U+DC80–U+DCFF,
      *surrogateescape*) as ``\\xNN``: the byte, as a shell's ``$'…'`` writes it
      (``docs/bad\\xffname.md``);
    - any other lone surrogate (a JSON ``\\ud800`` escape) as ``\\uXXXX``.
    """
    return _SURROGATE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_problem(value: str, limit: int) -> str | None:
    """Why ``value`` can't be stored as text (too long, NUL, a lone surrogate), or None."""
    if len(value) > limit:
        return f"has {len(value):,} characters; the limit is {limit:,}"
    if "\x00" in value:
        return "must not contain NUL characters"
    if not _encodable(value):
        return "holds a lone surrogate (\\ud800–\\udfff), which is not Unicode text"
    return None


def name_problem(value: str, limit: int) -> str | None:
    """Why ``value`` can't be a name (a uid, a type, a principal id …), or None.

    Names are compared as written, so nothing may make two of them look alike:
    no control or invisible format characters, no leading or trailing
    whitespace, and Unicode NFC form (``é`` as one character, not ``e`` + accent).
    """
    problem = text_problem(value, limit)
    if problem is not None:
        return problem
    if not value.strip():
        return "must not be empty or blank"
    if value != value.strip():
        return "must not start or end with whitespace"
    for char in value:
        if unicodedata.category(char) in _NOT_IN_NAMES:
            return (
                f"must not contain control characters or invisible ones (U+{ord(char):04X}:"
                " newline, tab, NUL, zero-width, bidi …)"
            )
    if not unicodedata.is_normalized("NFC", value):
        return "is not in Unicode NFC form; write accented letters composed (one code point)"
    return None


# -- principals ------------------------------------------------------------------------------------

#: What a principal looks like, as a pattern (the record JSON Schema's). ``check_principal``
#: holds a principal id to the rules of a name, which a pattern can't state (NFC, invisible
#: characters): the pattern is looser, never stricter.
PRINCIPAL_PATTERN = r"^(?:everyone|(?:user|group):\S(?:[^\x00-\x1f\x7f-\x9f]{0,254}\S)?)$"


def check_principal(principal: str) -> str:
    """Return ``principal`` if it is ``everyone``, ``user:<id>`` or ``group:<id>``."""
    if isinstance(principal, str):
        if principal == EVERYONE:
            return principal
        kind, sep, ident = principal.partition(":")
        if (
            sep
            and kind in ("user", "group")
            and name_problem(ident, MAX_PRINCIPAL_ID_CHARS) is None
        ):
            return principal
    shown = principal if isinstance(principal, str) else repr(principal)
    shown = printable(shown)
    raise InvalidRequest(
        f"invalid principal {shown[:80]!r}: write 'everyone', 'user:<id>' or 'group:<id>'"
        f" (an id of 1–{MAX_PRINCIPAL_ID_CHARS} characters: no control or invisible"
        " characters, no surrounding spaces)",
        principal=shown[:256],
    )


def check_membership(group: str, member: str) -> None:
    """A membership ``member ∈ group`` must name a group and may not be trivially cyclic."""
    check_principal(group)
    check_principal(member)
    if not group.startswith("group:"):
        raise InvalidRequest(f"{group!r} is not a group; memberships go into 'group:<id>'")
    if member == EVERYONE:
        raise InvalidRequest("'everyone' is implicit in every identity; it cannot be a member")
    if group == member:
        raise InvalidRequest(f"{group} cannot be a member of itself", cycle=[group, group])


# -- dates -----------------------------------------------------------------------------------------

_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
#: What every stored date looks like (see :func:`normalize_timestamp`).
TIMESTAMP_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_STORED = re.compile(r"(-?[0-9]{1,4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")


def normalize_timestamp(value: str, *, end_of_day: bool = False) -> str:
    """ISO 8601 date or datetime → ``YYYY-MM-DDTHH:MM:SSZ`` in UTC.

    A bare date means the start of that day (or its last second with
    ``end_of_day``, so that a range ending 2024-05-01 includes the day).
    A datetime without an offset is taken as UTC. Every year 0001–9999 round-trips:
    the result is four-digit, zero-padded, and sorts as text in time order. Raises
    ``ValueError`` (also for an offset that moves the moment outside those years).
    """
    text = value.strip()
    if not text:
        raise ValueError("empty date")
    if len(text) > MAX_DATE_CHARS or not text.isascii():
        raise ValueError(f"not an ISO 8601 date: {text[:MAX_DATE_CHARS]!r}")
    try:
        if _DAY.fullmatch(text):
            day = date.fromisoformat(text)
            moment = datetime.combine(day, time(23, 59, 59) if end_of_day else time(0, 0, 0), UTC)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # an offset that moves 0001-01-01 or 9999-12-31 out of range
        raise ValueError(f"{text!r} is outside the years 0001–9999 in UTC") from None
    return format_timestamp(moment)


def stored_timestamp(stamp: str) -> datetime | None:
    """A stored stamp back as an aware UTC datetime, or None if it isn't one.

    Also reads the unpadded years older versions wrote (``1-01-01T00:00:00Z``), so
    that no stamp a catalog holds can stop a derived index from being rebuilt.
    """
    match = _STORED.fullmatch(stamp.strip()) if isinstance(stamp, str) else None
    if match is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(part) for part in match.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None


def format_timestamp(moment: datetime) -> str:
    """A UTC datetime as ``YYYY-MM-DDTHH:MM:SSZ``, the year always four digits.

    (``strftime("%Y")`` writes year 1 as ``1`` on glibc: such a stamp neither sorts
    as text nor parses back.)
    """
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z"
    )
