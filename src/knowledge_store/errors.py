"""One exception tree for knowledge-store.

::

    KnowledgeStoreError                 code            HTTP  CLI exit
    ├── InputError                      (caller input)        2
    │   ├── InvalidRecord               invalid_record  422
    │   │   └── BatchRejected           invalid_record  422   (an ingest batch, every bad record)
    │   ├── InvalidRequest              invalid_request 400
    │   │   ├── MassDeleteRefused       invalid_request 400   (a sync would delete too much)
    │   │   └── SourceTakeoverRefused   invalid_request 400   (a batch would take another source's uids)
    │   ├── UnknownField                unknown_field   400
    │   ├── UnknownLabel                unknown_label   400
    │   ├── BoundExceeded               bound_exceeded  400
    │   ├── NotFound                    not_found       404
    │   ├── QueryTimeout                timeout         400
    │   └── ModelMismatch               model_mismatch  409
    └── StoreError                      store_error     500   1

Every error carries a ``message`` a person or a model can act on (which record,
line, field; what was expected) and structured ``details``. ``to_dict()`` gives
the one JSON error shape used on every surface:
``{"error": {"code", "message", "details"}}``.

Errors raised by sqlite3, tantivy, faiss, psycopg … are translated at the
engine boundary with ``raise StoreError(...) from exc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "MAX_MESSAGE_CHARS",
    "BatchRejected",
    "BoundExceeded",
    "InputError",
    "InvalidRecord",
    "InvalidRequest",
    "KnowledgeStoreError",
    "MassDeleteRefused",
    "ModelMismatch",
    "NotFound",
    "QueryTimeout",
    "Rejection",
    "SourceTakeoverRefused",
    "StoreError",
    "UnknownField",
    "UnknownLabel",
    "clip",
]


#: The longest text an error carries in its message or in one detail: an error names what
#: was wrong, it never echoes a large part of the request back (a body, a query, a token).
MAX_MESSAGE_CHARS = 1000


def clip(value: Any) -> Any:
    """``value`` with every string in it cut to :data:`MAX_MESSAGE_CHARS` (lists, dicts walked)."""
    if isinstance(value, str):
        if len(value) <= MAX_MESSAGE_CHARS:
            return value
        return f"{value[: MAX_MESSAGE_CHARS - 40]}… ({len(value)} characters in all)"
    if isinstance(value, list | tuple):
        return [clip(item) for item in value]
    if isinstance(value, dict):
        return {key: clip(item) for key, item in value.items()}
    return value


class KnowledgeStoreError(Exception):
    """Base of every error knowledge-store raises on purpose."""

    code: ClassVar[str] = "store_error"
    http_status: ClassVar[int] = 500
    exit_status: ClassVar[int] = 1

    def __init__(self, message: str, **details: Any) -> None:
        message = clip(message)
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {k: clip(v) for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InputError(KnowledgeStoreError):
    """The caller's input is wrong; nothing in the store changed."""

    code = "invalid_request"
    http_status = 400
    exit_status = 2


@dataclass(frozen=True)
class Rejection:
    """One bad ingest record: where it is and what is wrong with it."""

    file: str
    line: int | None
    uid: str | None
    field: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "uid": self.uid,
            "field": self.field,
            "message": self.message,
        }

    def describe(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        what = f" record {self.uid!r}" if self.uid else ""
        fld = f" field {self.field!r}" if self.field else ""
        return f"{where}{what}{fld}: {self.message}"


class InvalidRecord(InputError):
    """An ingest record is malformed (which file, line, uid, field; what was expected)."""

    code = "invalid_record"
    http_status = 422

    def __init__(self, rejection: Rejection) -> None:
        where = {k: v for k, v in rejection.to_dict().items() if k != "message"}
        super().__init__(rejection.describe(), **where, reason=rejection.message)
        self.rejection = rejection


class BatchRejected(InvalidRecord):
    """An ingest batch had bad records; the batch published nothing."""

    def __init__(self, rejections: list[Rejection]) -> None:
        first = rejections[0]
        super().__init__(first)
        more = len(rejections) - 1
        self.message = (
            f"{clip(first.describe())}"
            + (f" (and {more} more bad record{'s' if more != 1 else ''})" if more else "")
            + "; nothing was published. Fix the records, or publish the good ones"
            " with skip_invalid."
        )
        self.args = (self.message,)
        self.rejections = rejections
        self.details = {"rejected": [r.to_dict() for r in rejections]}


class InvalidRequest(InputError):
    """A request is malformed (bad option, inverted range, empty input …)."""


class MassDeleteRefused(InvalidRequest):
    """A sync would delete more of its source than the guard allows; nothing was published."""


class SourceTakeoverRefused(InvalidRequest):
    """A batch would overwrite entities another source holds; nothing was published."""


class UnknownField(InputError):
    """A filter, order or property names a field outside the closed list."""

    code = "unknown_field"


class UnknownLabel(InputError):
    """An edge label outside the closed 9-label vocabulary."""

    code = "unknown_label"


class BoundExceeded(InputError):
    """A request asks for more than a stated bound (depth, rows, k …)."""

    code = "bound_exceeded"


class NotFound(InputError):
    """The thing does not exist — or the caller may not read it (they look the same)."""

    code = "not_found"
    http_status = 404


class QueryTimeout(InputError):
    """A bounded query ran past its time limit and was cancelled."""

    code = "timeout"


class ModelMismatch(InputError):
    """The store was built with another embedding model or dimension."""

    code = "model_mismatch"
    http_status = 409


class StoreError(KnowledgeStoreError):
    """The store itself failed (disk, database, index); not the caller's fault."""
