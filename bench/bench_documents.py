"""The document loaders against the libraries they were chosen over: throughput, peak memory and
text fidelity, on real files (the PostgreSQL 15 manual as PDF and DOCX, see eval_documents.py).

Each candidate reads the same files in a process of its own (its peak RSS is that process's);
fidelity is the share of the words of the HTML page (as the HTML loader reads it) that the
candidate's text holds (recall), and the share of its words that the page holds (precision),
counted with multiplicity. The chosen readers run here as the loader runs them
(``read_document``, in one process, no worker); the others need a Python where they are
installed (``--others-python``: they are not dependencies of this project; PyMuPDF is AGPL and
measured only for reference).

    .venv/bin/python bench/bench_documents.py --html H --pdf P --docx D [--limit N] \\
        [--others-python /tmp/candidates/bin/python]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CANDIDATES = {
    "pdf": [
        "knowledge-store (pypdfium2)",
        "pdfminer.six",
        "pypdf",
        "markitdown",
        "kreuzberg",
        "pymupdf (AGPL)",
    ],
    "docx": ["knowledge-store (python-docx)", "mammoth", "markitdown", "kreuzberg"],
}


def _extract(name: str, path: str) -> str:
    if name.startswith("knowledge-store"):
        from knowledge_store.ingest.loaders.documents import read_document

        parts = read_document(Path(path).suffix[1:], Path(path).read_bytes(), Path(path).name)
        return "\n\n".join(p.body for p in parts) if isinstance(parts, list) else ""
    if name == "pdfminer.six":
        from pdfminer.high_level import extract_text

        return str(extract_text(path))
    if name == "pypdf":
        import pypdf

        return "\n\n".join(page.extract_text() for page in pypdf.PdfReader(path).pages)
    if name == "markitdown":
        from markitdown import MarkItDown

        return str(MarkItDown().convert(path).text_content)
    if name == "kreuzberg":
        import kreuzberg

        return str(kreuzberg.extract_file_sync(path).content)
    if name == "pymupdf (AGPL)":
        import pymupdf

        return "\n\n".join(page.get_text() for page in pymupdf.open(path))
    if name == "mammoth":
        import mammoth

        with open(path, "rb") as f:
            return str(mammoth.convert_to_markdown(f).value)
    raise ValueError(name)


def _run(name: str, files: list[str], out: str) -> None:
    """The worker mode: extract every file, write texts, seconds and peak RSS to ``out``."""
    texts, failed = {}, 0
    started = time.monotonic()
    for path in files:
        try:
            texts[path] = _extract(name, path)
        except Exception:
            texts[path], failed = "", failed + 1
    seconds = time.monotonic() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    Path(out).write_text(
        json.dumps({"texts": texts, "seconds": seconds, "rss": rss, "failed": failed})
    )


def _words(text: str) -> collections.Counter[str]:
    return collections.Counter(re.findall(r"[a-z0-9_]+", text.lower()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--run", nargs=3, metavar=("CANDIDATE", "LIST", "OUT"), help=argparse.SUPPRESS
    )
    parser.add_argument("--html", type=Path)
    parser.add_argument("--pdf", type=Path)
    parser.add_argument("--docx", type=Path)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--others-python", default=None)
    args = parser.parse_args()
    if args.run:
        name, listing, out = args.run
        _run(name, Path(listing).read_text().split("\n"), out)
        return
    from knowledge_store.ingest.loaders.html import parse_html

    print(f"load {os.getloadavg()}")
    for fmt, folder in (("pdf", args.pdf), ("docx", args.docx)):
        if folder is None:
            continue
        files = sorted(str(p) for p in folder.glob(f"*.{fmt}"))[: args.limit]
        size = sum(os.path.getsize(f) for f in files)
        refs = {
            f: _words(parse_html((args.html / (Path(f).stem + ".html")).read_text()).body)
            for f in files
        }
        with tempfile.TemporaryDirectory() as work:
            listing = Path(work) / "files"
            listing.write_text("\n".join(files))
            print(f"{fmt}: {len(files)} files, {size / 1024**2:.1f} MB")
            for name in CANDIDATES[fmt]:
                ours = name.startswith("knowledge-store")
                python = sys.executable if ours else args.others_python
                if python is None:
                    continue
                out = Path(work) / "out.json"
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)} if ours else None
                done = subprocess.run(
                    [python, __file__, "--run", name, str(listing), str(out)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0 or not out.exists():
                    print(f"  {name:<32} failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                result = json.loads(out.read_text())
                hit = total = made = 0
                for f, text in result["texts"].items():
                    words = _words(text)
                    hit += sum((refs[f] & words).values())
                    total += sum(refs[f].values())
                    made += sum(words.values())
                print(
                    f"  {name:<32} {len(files) / result['seconds']:7.1f} files/s"
                    f" {size / 1024**2 / result['seconds']:6.2f} MB/s"
                    f"  peak RSS {result['rss'] / 1024**2:6.0f} MiB"
                    f"  recall {hit / max(total, 1):.3f}  precision {hit / max(made, 1):.3f}"
                    f"  failed {result['failed']}"
                )
                out.unlink()


if __name__ == "__main__":
    main()
