"""Lines of code per package folder and the ``duplicates src`` pair count, for one or more trees.

Lines: every line of the tracked ``.py`` files, and the code lines among them
(not blank, not only a comment; docstrings count as code). Pairs: the first line
of the ``duplicates`` tool run in ``src`` (all pairs; by shape alone; boilerplate).

    .venv/bin/python bench/code_size.py before=/work/wt/h12before after=/work/wt/h12b
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

FOLDERS = ("engines", "surfaces", "retrieval", "model", "")  # "": all of src/knowledge_store


def lines(tree: Path, folder: str) -> tuple[int, int, int]:
    """``(files, lines, code lines)`` of the tracked Python files below ``folder``."""
    where = f"src/knowledge_store/{folder}".rstrip("/")
    specs = [where, f"{where}.py"] if folder else [where]  # a package or a module of that name
    listed = subprocess.run(
        ["git", "-C", str(tree), "ls-files", *specs], capture_output=True, text=True, check=True
    ).stdout.split()
    files = [tree / f for f in listed if f.endswith(".py")]
    total = code = 0
    for path in files:
        for line in path.read_text().splitlines():
            total += 1
            stripped = line.strip()
            code += bool(stripped) and not stripped.startswith("#")
    return len(files), total, code


def duplicates(tree: Path) -> str:
    out = subprocess.run(
        ["duplicates", "--seconds", "300"],
        cwd=tree / "src",
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    first = out.splitlines()[0] if out else "duplicates gave no answer"
    found = re.match(
        r"(\d+) pairs .*\((\d+) by shape alone, (\d+) of those marked boilerplate\)", first
    )
    if not found:
        return first
    pairs, shape, boiler = (int(g) for g in found.groups())
    return f"{pairs} pairs ({pairs - shape} identical, {shape} by shape, {boiler} boilerplate)"


def main() -> None:
    trees = [arg.partition("=") for arg in sys.argv[1:]] or [("this", "", ".")]
    for name, _, where in trees:
        tree = Path(where)
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        print(f"{name} ({where} at {head}): duplicates src: {duplicates(tree)}")
        for folder in FOLDERS:
            files, total, code = lines(tree, folder)
            label = folder or "all of src"
            print(f"  {label:<12} {files:4d} files {total:7d} lines {code:7d} code lines")


if __name__ == "__main__":
    main()
