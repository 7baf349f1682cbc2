"""E-mail: a message file (``.eml``) is one message; a mailbox (``.mbox``) a part per message.

Read with the standard library's e-mail parser. A message's subject is its title, its
sender, recipients and ``Message-ID`` are attributes, its date its ``created_at``; its
body is the plain-text part, else the HTML part as Markdown (the HTML loader), and the
names of its attachments are listed (their content is not read). A reply is ``partOf``
the message it answers (``In-Reply-To``, else the last of ``References``) when that
message is in the same load — a thread is a tree of ``partOf`` edges; in a mailbox a
message that answers none is ``partOf`` the mailbox. Bounded: at most
:data:`MAX_MESSAGES` messages in a mailbox, and MIME parts nested at most
:data:`MAX_MIME_DEPTH` deep.
"""

from __future__ import annotations

import email
import re
from email import policy
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from typing import Any

from knowledge_store.ingest.loaders.parts import Part, Unreadable, escape_line, paragraphs

__all__ = ["MAX_MESSAGES", "MAX_MIME_DEPTH", "read_eml", "read_mbox"]

MAX_MESSAGES = 20_000
MAX_MIME_DEPTH = 20
_FROM_LINE = re.compile(rb"^From [^\r\n]*\r?\n", re.MULTILINE)
_ID = re.compile(r"<([^<>\s]{1,500})>")


def _date(value: str | None) -> str | None:
    try:
        moment = parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError, IndexError):
        return None
    if moment is None or not 1 <= moment.year <= 9999:
        return None
    return moment.replace(microsecond=0).isoformat()


def _depth(message: EmailMessage, depth: int = 0) -> int:
    if depth > MAX_MIME_DEPTH or not message.is_multipart():
        return depth
    return max((_depth(part, depth + 1) for part in message.iter_parts()), default=depth)  # type: ignore[arg-type]


def _text(message: EmailMessage) -> str:
    from knowledge_store.ingest.loaders.html import parse_html

    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError):
        content = part.get_payload(decode=True) or b""
        content = (
            content.decode("utf-8", errors="replace")
            if isinstance(content, bytes)
            else str(content)
        )
    if part.get_content_subtype() == "html":
        page = parse_html(str(content))
        return page.body if page.problem is None else ""
    return "\n".join(escape_line(line) for line in str(content).splitlines())


def _message(message: EmailMessage, key: str | None, position: int | None) -> Part:
    header = {
        name: " ".join(str(message.get(name, "")).split())
        for name in ("subject", "from", "to", "cc", "date")
    }
    ids = _ID.findall(str(message.get("message-id", "")))
    replies = (
        _ID.findall(str(message.get("in-reply-to", "")))
        or _ID.findall(str(message.get("references", "")))[-1:]
    )
    attachments = [name for part in message.iter_attachments() if (name := part.get_filename())]
    attributes: dict[str, Any] = {
        k: v for k, v in (("from", header["from"]), ("to", header["to"]), ("cc", header["cc"])) if v
    }
    if ids:
        attributes["message_id"] = ids[0]
    if replies:
        attributes["in_reply_to"] = replies[0]
    if attachments:
        attributes["attachments"] = attachments[:100]
    lines = [
        f"From: {header['from']}" if header["from"] else "",
        f"Date: {header['date']}" if header["date"] else "",
    ]
    body = paragraphs(
        [
            f"# {header['subject'] or '(no subject)'}",
            "\n".join(line for line in lines if line),
            _text(message),
            "Attachments: " + ", ".join(attachments) if attachments else "",
        ]
    )
    return Part(
        key=key,
        type="message",
        title=header["subject"] or "(no subject)",
        body=body,
        attributes=attributes,
        created_at=_date(header["date"] or None),
        parent="" if key is not None else None,
        position=position,
        message_id=ids[0] if ids else None,
        replies_to=replies[0] if replies else None,
    )


def _parse(data: bytes) -> EmailMessage | Unreadable:
    message = email.message_from_bytes(data, policy=policy.default)
    assert isinstance(message, EmailMessage)
    if _depth(message) > MAX_MIME_DEPTH:
        return Unreadable(f"its MIME parts nest more than {MAX_MIME_DEPTH} deep")
    return message


def read_eml(data: bytes, name: str) -> list[Part] | Unreadable:
    """One message file as one part, or why it can't be read."""
    message = _parse(data)
    if isinstance(message, Unreadable):
        return message
    if not message.keys():
        return Unreadable("not an e-mail message (no header)")
    return [_message(message, None, None)]


def read_mbox(data: bytes, name: str) -> list[Part] | Unreadable:
    """A mailbox: the mailbox, then a part per message (``#message-N``), or why not."""
    starts = [m.start() for m in _FROM_LINE.finditer(data)]
    if not starts or starts[0] != 0:
        return Unreadable("not an mbox mailbox (it does not start with a 'From ' line)")
    if len(starts) > MAX_MESSAGES:
        return Unreadable(f"{len(starts):,} messages; the limit is {MAX_MESSAGES:,}")
    parts: list[Part] = []
    for number, (start, end) in enumerate(
        zip(starts, [*starts[1:], len(data)], strict=True), start=1
    ):
        raw = _FROM_LINE.sub(b"", data[start:end], count=1)
        raw = re.sub(rb"^>(>*From )", rb"\1", raw, flags=re.MULTILINE)  # mboxrd quoting
        message = _parse(raw)
        if isinstance(message, Unreadable):
            return Unreadable(f"message {number}: {message.reason}")
        parts.append(_message(message, f"message-{number}", number))
    listed = "\n".join(f"{n}. {p.title}" for n, p in enumerate(parts, start=1))
    box = Part(
        key=None,
        type="mailbox",
        title=None,
        body=paragraphs([listed]),
        attributes={"messages": len(parts)},
    )
    return [box, *parts]
