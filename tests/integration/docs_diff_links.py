#!/usr/bin/env python3
"""CTest `docs_diff_links` (label docs): a chapter links the page that explains what its diff adds.

Each chapter docs/NN_*.md explains its step's diff (docs/diffs/NN.diff; for step 01, which has no
diff, every line of its source files) or links the page that does. Some code in the steps is beyond
the course and is explained on a page of its own; a chapter whose diff adds, removes or changes such
a line must link that page. The rules (a pattern on a changed line, the page it needs):

    clip                                           hooks_and_clipping.md  (--clip_grad_norm, from step 01)
    comm_hook, check_finite, powersgd, nonfinite   hooks_and_clipping.md  (step 06's hooks, finite check)

A link is a Markdown link to the page, `](page` or `](page#anchor`. Every other line of a diff has to
be explained by its chapter's own text, which no test can check.

Usage: tests/integration/docs_diff_links.py [ROOT]   exit 1 naming each chapter, the page it lacks,
and the first changed lines that need it
"""
import pathlib
import re
import sys

RULES = [
    (re.compile(r"clip", re.I), "hooks_and_clipping.md", "gradient clipping (--clip_grad_norm)"),
    (re.compile(r"comm_hook|check_finite|powersgd|nonfinite", re.I), "hooks_and_clipping.md",
     "communication hooks, PowerSGD, the finite check"),
]


def changed_lines(root, n):
    """The lines step NN changes: its diff's +/- lines; for step 01, every line of its sources."""
    if n == "01":
        out = []
        for f in sorted((root / "steps").glob("01_*/*")):
            if f.suffix in (".c", ".h"):
                out += [f"+{line}" for line in f.read_text().splitlines()]
        return out
    diff = root / "docs" / "diffs" / f"{n}.diff"
    return [line for line in diff.read_text().splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    bad = []
    chapters = sorted((root / "docs").glob("[0-9][0-9]_*.md"))
    if not chapters:
        sys.exit(f"docs_diff_links: no chapters under {root / 'docs'}")
    for chapter in chapters:
        n = chapter.name[:2]
        if n != "01" and not (root / "docs" / "diffs" / f"{n}.diff").exists():
            bad.append(f"{chapter.name}: no docs/diffs/{n}.diff")
            continue
        text = chapter.read_text()
        lines = changed_lines(root, n)
        for pattern, page, what in RULES:
            hits = [line for line in lines if pattern.search(line)]
            if hits and not re.search(r"\]\(" + re.escape(page) + r"[)#]", text):
                sample = "\n    ".join(h[:110] for h in hits[:3])
                bad.append(f"{chapter.name}: its diff changes {len(hits)} line(s) of {what}, and it does not "
                           f"link {page}, which explains them:\n    {sample}")
    for b in bad:
        print(f"FAILED {b}")
    print(f"docs_diff_links: {len(chapters)} chapters, {'ok' if not bad else f'{len(bad)} missing links'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
