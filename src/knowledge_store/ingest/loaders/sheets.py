"""Spreadsheets (XLSX, with python-calamine: MIT, the ``docs`` extra) and CSV/TSV files
(the standard library), a sheet's rows as text with their header.

The first non-empty row of a sheet is its header; every later row becomes a line
``Header: value · Header: value`` (empty cells left out), so that any chunk of rows
reads on its own. Rows go in groups of about one chunk, each group starting with a
location marker naming the sheet and its rows as the spreadsheet numbers them
(``{"sheet": "Budget", "rows": "2-31"}``; a CSV file: rows only). A sheet is a
``## name`` section. Bounded: the text may not pass a body's limit
(``MAX_BODY_CHARS``) — a larger sheet is refused, naming the row it reached — and a
CSV field may not pass :data:`MAX_FIELD_CHARS`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime, time

from knowledge_store.ingest.chunking import location_marker
from knowledge_store.ingest.loaders.parts import Part, Unreadable, escape_line, paragraphs
from knowledge_store.model import MAX_BODY_CHARS

__all__ = ["MAX_FIELD_CHARS", "read_csv", "read_xlsx"]

#: The longest CSV field read.
MAX_FIELD_CHARS = 100_000
#: A group of rows (one location) holds about this many characters.
_GROUP_CHARS = 800


class _TooLarge(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return " ".join(str(value).split())


def _row_line(header: Sequence[str], row: Sequence[object]) -> str:
    cells = [_text(v) for v in row]
    named = [
        f"{header[i] if i < len(header) and header[i] else f'column {i + 1}'}: {cell}"
        for i, cell in enumerate(cells)
        if cell
    ]
    return escape_line(" · ".join(named))


def _sheet_blocks(
    rows: Iterable[Sequence[object]], sheet: str | None, budget: list[int]
) -> Iterator[str]:
    """The blocks of one sheet: its header line, then groups of rows under their marker.

    ``budget``: characters left for the body (shared by the sheets of a file).
    """
    header: list[str] | None = None
    group: list[str] = []
    first = last = 0
    size = 0

    def marker() -> str:
        where: dict[str, object] = {"rows": f"{first}-{last}" if first != last else str(first)}
        return location_marker({"sheet": sheet, **where} if sheet is not None else where)

    for number, row in enumerate(rows, start=1):
        if header is None:
            if any(_text(v) for v in row):
                header = [_text(v) for v in row]
                yield "Columns: " + escape_line(" · ".join(h for h in header if h))
            continue
        line = _row_line(header, row)
        if not line:
            continue
        budget[0] -= len(line) + 1
        if budget[0] < 0:
            raise _TooLarge(f"row {number:,}" + (f" of the sheet {sheet!r}" if sheet else ""))
        if not group:
            first = number
        group.append(line)
        last = number
        size += len(line) + 1
        if size >= _GROUP_CHARS:
            yield marker() + "\n\n" + "\n".join(group)
            group, size = [], 0
    if group:
        yield marker() + "\n\n" + "\n".join(group)


def _too_large(where: str) -> Unreadable:
    return Unreadable(
        f"too large: its rows pass the {MAX_BODY_CHARS:,} characters a body may hold at {where};"
        " split it into smaller files"
    )


def read_xlsx(data: bytes, name: str) -> list[Part] | Unreadable:
    """The workbook ``data`` as one part, a section per sheet, or why it can't be read."""
    from python_calamine import CalamineError, CalamineWorkbook

    try:
        book = CalamineWorkbook.from_filelike(io.BytesIO(data))
    except (CalamineError, ValueError, OSError) as exc:
        return Unreadable(f"not a spreadsheet that can be read ({exc})")
    budget = [MAX_BODY_CHARS]
    blocks: list[str] = []
    try:
        for sheet in book.sheet_names:
            blocks.append(f"## {' '.join(sheet.split())}")
            rows = book.get_sheet_by_name(sheet).iter_rows()
            blocks.extend(_sheet_blocks(rows, sheet, budget))
    except _TooLarge as exc:
        return _too_large(exc.where)
    except CalamineError as exc:
        return Unreadable(f"a sheet could not be read ({exc})")
    return [
        Part(
            key=None,
            type="spreadsheet",
            title=None,
            body=paragraphs(blocks),
            attributes={"sheets": list(book.sheet_names)},
        )
    ]


def read_csv(data: bytes, name: str) -> list[Part] | Unreadable:
    """The CSV (or TSV) ``data`` as one part, or why it can't be read."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Unreadable(f"not UTF-8 text (byte {exc.start:,}); save it as UTF-8")
    if name.lower().endswith(".tsv"):
        dialect: type[csv.Dialect] | csv.Dialect = csv.excel_tab
    else:
        try:
            dialect = csv.Sniffer().sniff(text[:65536], delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    csv.field_size_limit(MAX_FIELD_CHARS)
    budget = [MAX_BODY_CHARS]
    try:
        blocks = list(_sheet_blocks(csv.reader(io.StringIO(text), dialect), None, budget))
    except _TooLarge as exc:
        return _too_large(exc.where)
    except csv.Error as exc:
        return Unreadable(f"not CSV that can be read ({exc})")
    if len(blocks) <= 1:
        return Unreadable("no rows below its header")
    return [Part(key=None, type="spreadsheet", title=None, body=paragraphs(blocks))]
