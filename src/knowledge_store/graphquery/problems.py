"""``QueryError``: one problem found in a query, with where it is.

Not an exception: the lenient mode returns a list of them. ``to_exception()``
gives the typed error of :mod:`knowledge_store.errors` that the strict mode
raises (code, sentence, and ``line``/``column`` in its details).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from knowledge_store.errors import (
    BoundExceeded,
    InputError,
    InvalidRequest,
    QueryTimeout,
    UnknownField,
    UnknownLabel,
)

__all__ = ["QueryError", "raise_errors"]

_BY_CODE: dict[str, type[InputError]] = {
    InvalidRequest.code: InvalidRequest,
    UnknownField.code: UnknownField,
    UnknownLabel.code: UnknownLabel,
    BoundExceeded.code: BoundExceeded,
    QueryTimeout.code: QueryTimeout,
}


@dataclass(frozen=True)
class QueryError:
    """A problem in a query: an error code of DESIGN §6, a sentence, and a position."""

    code: str
    message: str
    line: int | None = None
    column: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.line is None:
            return self.message
        return f"line {self.line}, column {self.column}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "line": self.line,
            "column": self.column,
            **({"details": self.details} if self.details else {}),
        }

    def to_exception(self) -> InputError:
        cls = _BY_CODE.get(self.code, InvalidRequest)
        return cls(self.describe(), line=self.line, column=self.column, **self.details)


def raise_errors(errors: Sequence[QueryError], *, all_of_them: bool) -> None:
    """Raise the first error (with every other one in ``details.errors`` when asked)."""
    if not errors:
        return
    first = errors[0].to_exception()
    if all_of_them:
        more = len(errors) - 1
        if more:
            first.message += (
                f" (and {more} more problem{'s' if more != 1 else ''}: see details.errors)"
            )
            first.args = (first.message,)
        first.details["errors"] = [e.to_dict() for e in errors]
    raise first
