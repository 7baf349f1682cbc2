"""Real document files made for the tests: PDFs written by hand (PDF 1.4 syntax, Helvetica
text at chosen sizes, an outline, a password, 100,000 pages, a page tree that loops), and
DOCX, PPTX, XLSX, EPUB and e-mail files made with the libraries that write them."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

Line = tuple[str, float]  # text, font size


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _content(lines: Sequence[Line]) -> bytes:
    y = 780.0
    ops = []
    for text, size in lines:
        y -= size * 1.6
        ops.append(f"BT /F1 {size:g} Tf 50 {y:.1f} Td ({_escape(text)}) Tj ET")
    return "\n".join(ops).encode("latin-1")


def _assemble(objects: list[bytes], root: int, trailer_extra: str = "") -> bytes:
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(
        f"trailer\n<< /Size {len(objects) + 1} /Root {root} 0 R {trailer_extra}>>\n"
        f"startxref\n{xref}\n%%EOF\n".encode()
    )
    return out.getvalue()


def pdf(
    pages: Sequence[Sequence[Line]],
    *,
    outline: Sequence[tuple[str, int]] = (),
    title: str | None = None,
    encrypted: bool = False,
) -> bytes:
    """A PDF of ``pages`` (lines of text at their sizes); ``outline``: (title, page index)."""
    objects: list[bytes] = []

    def add(body: str | bytes) -> int:
        objects.append(body.encode("latin-1") if isinstance(body, str) else body)
        return len(objects)

    catalog = add("")  # filled in below
    tree = add("")
    font = add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    page_ids = []
    for lines in pages:
        stream = _content(lines)
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        page_ids.append(
            add(
                f"<< /Type /Page /Parent {tree} 0 R /MediaBox [0 0 612 792]"
                f" /Contents {content} 0 R /Resources << /Font << /F1 {font} 0 R >> >> >>"
            )
        )
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objects[tree - 1] = f"<< /Type /Pages /Kids [{kids}] /Count {len(page_ids)} >>".encode()
    outlines = ""
    if outline:
        top = add("")
        items = [len(objects) + 1 + i for i in range(len(outline))]
        for i, (text, page) in enumerate(outline):
            links = f" /Prev {items[i - 1]} 0 R" if i else ""
            links += f" /Next {items[i + 1]} 0 R" if i + 1 < len(items) else ""
            add(
                f"<< /Title ({_escape(text)}) /Parent {top} 0 R{links}"
                f" /Dest [{page_ids[page]} 0 R /XYZ 0 792 0] >>"
            )
        objects[top - 1] = (
            f"<< /Type /Outlines /First {items[0]} 0 R /Last {items[-1]} 0 R /Count {len(items)} >>"
        ).encode()
        outlines = f" /Outlines {top} 0 R /PageMode /UseOutlines"
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {tree} 0 R{outlines} >>".encode()
    extra = ""
    if title is not None:
        extra += f"/Info {add(f'<< /Title ({_escape(title)}) >>')} 0 R "
    if encrypted:
        owner = "<" + "a1" * 32 + ">"
        user = "<" + "b2" * 32 + ">"
        encrypt = add(f"<< /Filter /Standard /V 1 /R 2 /O {owner} /U {user} /P -44 >>")
        extra += f"/Encrypt {encrypt} 0 R /ID [<0123456789abcdef0123456789abcdef> <0123456789abcdef0123456789abcdef>] "
    return _assemble(objects, catalog, extra)


def pdf_of_many_pages(count: int) -> bytes:
    """``count`` pages sharing one content stream (100,000 pages: ~6 MB)."""
    stream = _content([("A page among many.", 12)])
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{5 + i} 0 R' for i in range(count))}]"
        f" /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 3 0 R >> >> >>"
    )
    objects += [page] * count
    return _assemble(objects, 1)


def pdf_with_a_looping_page_tree() -> bytes:
    """A page tree whose node lists itself among its kids (and a page: its parent is the
    node) — a reader that follows it without care never ends."""
    stream = _content([("Round and round.", 12)])
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 5 0 R 2 0 R] /Count 1000000 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 3 0 R >> >> >>",
    ]
    return _assemble(objects, 1)


def scanned_pdf(pages: int = 3) -> bytes:
    """Pages that are pictures (here: filled rectangles), with no text layer."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    stream = b"0.5 g 50 50 500 700 re f"
    for _ in range(pages):
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objects)} 0 R >>".encode()
        )
        kids.append(len(objects))
    objects[1] = (
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {pages} >>".encode()
    )
    return _assemble(objects, 1)


def docx(title: str = "Runbook") -> bytes:
    """A Word file: a title, headings, a bulleted and a nested list, a table, a link."""
    import docx as python_docx
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml.ns import qn
    from docx.oxml.parser import OxmlElement

    document = python_docx.Document()
    document.core_properties.title = title
    document.core_properties.author = "Ann"
    document.add_heading(title, level=0)
    document.add_heading("Failover", level=1)
    document.add_paragraph("Promote the replica when the primary is lost.")
    document.add_paragraph("Check the replication lag", style="List Bullet")
    document.add_paragraph("Stop the old primary", style="List Bullet")
    document.add_paragraph("Fence it at the switch", style="List Bullet 2")
    document.add_heading("Contacts", level=2)
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(
        table.rows[0].cells + table.rows[1].cells, ["team", "pager", "SRE", "555-0100"], strict=True
    ):
        cell.text = text
    paragraph = document.add_paragraph("See ")
    relation = paragraph.part.relate_to("records.md", RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), relation)
    run = OxmlElement("w:r")
    text = OxmlElement("w:t")
    text.text = "the records"
    run.append(text)
    link.append(run)
    paragraph._p.append(link)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx() -> bytes:
    """Three slides: titles, bullets (one nested), a table, speaker notes on the second."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    deck.core_properties.title = "Quarterly review"
    for number, (title, bullets) in enumerate(
        [
            ("Quarterly review", ["Revenue grew", "Costs fell"]),
            ("Incidents", ["Two outages", "Both in payments"]),
            ("Next quarter", ["Hire two SREs"]),
        ],
        start=1,
    ):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        frame = slide.placeholders[1].text_frame
        frame.text = bullets[0]
        for more in bullets[1:]:
            paragraph = frame.add_paragraph()
            paragraph.text = more
            paragraph.level = 1 if number == 2 else 0
        if number == 2:
            slide.notes_slide.notes_text_frame.text = "Mention the replica promotion drill."
        if number == 3:
            shape = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1))
            for cell, text in zip(
                [c for row in shape.table.rows for c in row.cells],
                ["role", "count", "SRE", "2"],
                strict=True,
            ):
                cell.text = text
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx(rows: int = 120) -> bytes:
    """A workbook: a sheet of ``rows`` people with a header, and a small second sheet."""
    import xlsxwriter

    out = io.BytesIO()
    book = xlsxwriter.Workbook(out, {"in_memory": True})
    people = book.add_worksheet("People")
    people.write_row(0, 0, ["name", "team", "on call"])
    for i in range(rows):
        people.write_row(i + 1, 0, [f"person {i + 1}", "payments" if i % 2 else "search", i % 7])
    costs = book.add_worksheet("Costs")
    costs.write_row(0, 0, ["item", "cost"])
    costs.write_row(1, 0, ["servers", 1200])
    book.close()
    return out.getvalue()


def epub() -> bytes:
    """An EPUB 3 book of two chapters, the second linking to the first."""
    chapter = (
        '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
        "<head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>"
    )
    files = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": (
            '<?xml version="1.0"?><container version="1.0"'
            ' xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>"
        ),
        "OEBPS/content.opf": (
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The Replica Book'
            "</dc:title><dc:creator>Ann</dc:creator><dc:language>en</dc:language></metadata>"
            '<manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml"'
            ' properties="nav"/><item id="c1" href="text/one.xhtml"'
            ' media-type="application/xhtml+xml"/><item id="c2" href="text/two.xhtml"'
            ' media-type="application/xhtml+xml"/></manifest>'
            '<spine><itemref idref="c1"/><itemref idref="c2"/></spine></package>'
        ),
        "OEBPS/nav.xhtml": (
            '<html xmlns="http://www.w3.org/1999/xhtml"><body><nav><ol>'
            '<li><a href="text/one.xhtml">Promoting a replica</a></li>'
            '<li><a href="text/two.xhtml">Fencing the old primary</a></li></ol></nav></body></html>'
        ),
        "OEBPS/text/one.xhtml": chapter.format(
            title="Promoting", body="<p>Promote the replica with one command.</p>"
        ),
        "OEBPS/text/two.xhtml": chapter.format(
            title="Fencing",
            body='<p>Fence the old primary first; <a href="one.xhtml">promote</a> after.</p>',
        ),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as book:
        for name, text in files.items():
            book.writestr(name, text)
    return out.getvalue()


def zip_bomb(suffix: str = ".docx", inflated: int = 600 * 1024**2) -> bytes:
    """A zip container whose one part inflates to ``inflated`` bytes of zeros (600 KB of zip)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bomb:
        bomb.writestr("[Content_Types].xml", "<Types/>")
        with bomb.open(
            "word/document.xml" if suffix == ".docx" else "xl/big.xml", "w", force_zip64=True
        ) as part:
            block = bytes(1024**2)
            for _ in range(inflated // len(block)):
                part.write(block)
    return out.getvalue()


def message(
    subject: str, sender: str, message_id: str, replies_to: str | None = None, body: str = ""
) -> str:
    """One e-mail message as RFC 5322 text."""
    lines = [
        f"From: {sender}",
        "To: team@example.org",
        f"Subject: {subject}",
        "Date: Tue, 02 Apr 2024 08:00:00 +0000",
        f"Message-ID: <{message_id}>",
    ]
    if replies_to:
        lines.append(f"In-Reply-To: <{replies_to}>")
    return "\n".join(lines) + "\n\n" + (body or f"About {subject.lower()}.") + "\n"


def mbox(messages: Sequence[str]) -> str:
    return "".join(f"From sender@example.org Tue Apr  2 08:00:00 2024\n{m}\n" for m in messages)
