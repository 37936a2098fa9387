#!/usr/bin/env python3
"""CTest `docs_quotes` (label docs): every C line the docs quote exists in the code.

The docs never paste step code, but they quote single lines (CONTRIBUTING.md), and a quote goes stale
when the line changes. A quoted C line is an inline code span in docs/*.md that ends with `;` (a
statement) or carries a course tag comment (`// [ddp] ...`). Each must appear, with runs of blanks
made one, inside one line of a .c or .h file under steps/ or common/. A span with an ellipsis (`…`)
is checked piece by piece: every piece must be in the same line, in order.

Usage: tests/integration/docs_quotes.py [ROOT]   exit 1 naming every quote not found (file:line)
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def norm(s):
    return re.sub(r"\s+", " ", s.strip())


def is_c_line(span):
    s = span.strip()
    return s.endswith(";") or re.search(r"//\s*\[[a-z]+\]", s) is not None


code_lines = []
for sub in ("steps", "common"):
    for path in sorted((root / sub).rglob("*")):
        if path.suffix in (".c", ".h") and path.is_file():
            code_lines.extend(norm(l) for l in path.read_text(errors="replace").splitlines())


def found(span):
    pieces = [norm(p) for p in span.split("…") if norm(p)]
    for line in code_lines:
        pos = 0
        for p in pieces:
            pos = line.find(p, pos)
            if pos < 0:
                break
            pos += len(p)
        else:
            return True
    return False


checked = missing = 0
for md in sorted((root / "docs").glob("*.md")):
    in_fence = False
    for n, line in enumerate(md.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for m in SPAN.finditer(line):
            span = m.group(1)
            if not is_c_line(span):
                continue
            checked += 1
            if not found(span):
                missing += 1
                print(f"{md.relative_to(root)}:{n}: quoted C line not in steps/ or common/: `{span}`")
print(f"docs_quotes: {checked} quoted C lines, {missing} not found in steps/ or common/")
sys.exit(1 if missing else 0)
