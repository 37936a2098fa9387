#!/usr/bin/env python3
"""CTest `docs_flags` (label docs): docs/flags.md lists the flags each program's `--help` prints.

docs/flags.md is the flag reference that the README once carried; every program explains its own flags
with `--help`, and this test keeps the two in step. It runs each program (build/bin/01_single_gpu ...
08_fsdp) with `--help` and reads the flags it prints: the lines of its `flags:` list, `  --name VALUE
description` (`-h, --help` too). docs/flags.md lists them in tables whose header begins
`| flag | steps | default |`, one row per flag:

    | `--epochs N` | 01–08 | `3` | ... |

- the first cell names the flag with its value as `--help` prints it (`--tf32` takes none; a `|` in
  it written `\\|`, as a Markdown table needs); `-h` and `--help` share a row;
- the steps cell says which programs have it: `01–08`, `06`, or a list `02, 06–08` (by the number the
  program's name starts with);
- the default cell is `--help`'s `(default V)` as a code span, where `--help` prints one (`<program>`
  stands for the program's name: `checkpoints/<program>`), and no code span where it prints none.

It fails, naming the program and the flag, where `--help` prints a flag that docs/flags.md does not
list for that program, where docs/flags.md lists a flag for a program whose `--help` lacks it, and where
a value or a default differs. Only the tables are checked: the prose around them is not.

Usage: tests/integration/docs_flags.py [ROOT [BIN_DIR [PROGRAM...]]]
  ROOT     the repository (default: this file's, two folders up)
  BIN_DIR  where the programs are (default: DDP_BIN_DIR, else ROOT/build/bin)
  PROGRAM  the programs to check (default: the folders steps/NN_* under ROOT)
exit 1 naming every difference
"""
import os
import pathlib
import re
import subprocess
import sys

HEADER = re.compile(r"^\|\s*flag\s*\|\s*steps\s*\|\s*default\s*\|")
# a flag in --help's list: two blanks, the flag (`-h, --help` for help), then its value after one blank
# (a description follows after two or more; a long value may leave only one blank before it)
HELP_LINE = re.compile(r"^  (-h, )?(--[a-z0-9_]+)")
DEFAULT = re.compile(r"\(default ([^)]*)\)\s*$")
SPAN = re.compile(r"`([^`]+)`")


def help_flags(program):
    """{flag: (value or None, default or None)} from PROGRAM --help; '-h' and '--help' both."""
    p = subprocess.run([str(program), "--help"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise SystemExit(f"docs_flags: {program} --help exited with {p.returncode}:\n{p.stdout}{p.stderr}")
    flags, listing = {}, False
    for line in p.stdout.splitlines():
        if line.strip() == "flags:":
            listing = True
            continue
        if not listing:
            continue
        if not line.startswith("  "):
            if line.strip():
                break  # `limits:` and whatever else follows the list
            continue
        m = HELP_LINE.match(line)
        if not m:
            continue
        short, name = m.groups()
        value = re.match(r" (\S+)", line[m.end():])  # one blank then a word; two or more: the description
        value = value.group(1) if value else None
        d = DEFAULT.search(line)
        flags[name] = (value, d.group(1) if d else None)
        if short:
            flags["-h"] = (None, None)
    if not flags:
        raise SystemExit(f"docs_flags: {program} --help printed no `flags:` list:\n{p.stdout}")
    return flags


def steps_of(cell):
    """'01–08' -> {1..8}; '06' -> {6}; '02, 06–08' -> {2, 6, 7, 8}; None where the cell is not that."""
    out = set()
    for part in cell.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d\d)(?:[–-](\d\d))?", part)
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if hi < lo:
            return None
        out |= set(range(lo, hi + 1))
    return out


def doc_rows(path):
    """[(line number, [(flag, value)], steps, default cell)] of every flag table in docs/flags.md."""
    rows, bad, in_table = [], [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if HEADER.match(line):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        # cells split at unescaped pipes; `--device auto\|cpu\|cuda` is a code span with pipes in a cell
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if set(cells[0]) <= set("-: "):
            continue  # the | --- | row
        if len(cells) < 4:
            bad.append(f"docs/flags.md:{n}: a flag row needs 4 cells (flag, steps, default, what): {line}")
            continue
        flags = []
        for span in SPAN.findall(cells[0]):
            words = span.split()
            if words and words[0].startswith("-"):
                flags.append((words[0], " ".join(words[1:]) or None))
        steps = steps_of(cells[1])
        if not flags or steps is None:
            bad.append(f"docs/flags.md:{n}: cannot read the flag or the steps (`01–08`, `06`) of: {line}")
            continue
        rows.append((n, flags, steps, cells[2]))
    return rows, bad


def main():
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    bin_dir = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else
                           os.environ.get("DDP_BIN_DIR", root / "build" / "bin"))
    programs = sys.argv[3:] or sorted(d.name for d in (root / "steps").glob("[0-9][0-9]_*") if d.is_dir())
    doc = root / "docs" / "flags.md"
    rows, bad = doc_rows(doc)
    if not rows:
        bad.append("docs/flags.md: no flag table (a header `| flag | steps | default | what it does |`)")
    seen = {}
    for n, flags, _, _ in rows:
        for flag, _ in flags:
            if flag in seen:
                bad.append(f"docs/flags.md:{n}: {flag} has a row already (line {seen[flag]})")
            seen.setdefault(flag, n)
    checked = 0
    for program in programs:
        exe = bin_dir / program
        if not exe.exists():
            bad.append(f"{program}: not built ({exe} is missing)")
            continue
        number = int(program[:2])
        helped = help_flags(exe)
        listed = {}
        for n, flags, steps, default in rows:
            if number in steps:
                for flag, value in flags:
                    listed[flag] = (n, value, default)
        for flag in helped:
            if flag not in listed:
                where = f" (its row, line {seen[flag]}, leaves out step {program[:2]})" if flag in seen else ""
                bad.append(f"{program}: --help prints {flag}, docs/flags.md does not list it for this "
                           f"program{where}")
        for flag, (n, value, default) in listed.items():
            if flag not in helped:
                bad.append(f"{program}: docs/flags.md:{n} lists {flag} for it, its --help does not print it")
                continue
            want_value, want_default = helped[flag]
            if flag != "-h" and value != want_value:
                bad.append(f"{program}: docs/flags.md:{n} writes `{flag}{' ' + value if value else ''}`, "
                           f"--help `{flag}{' ' + want_value if want_value else ''}`")
            spans = SPAN.findall(default)
            got_default = spans[0].replace("<program>", program) if len(spans) == 1 and \
                SPAN.fullmatch(default) else None
            if want_default is not None and got_default != want_default:
                bad.append(f"{program}: docs/flags.md:{n} gives {flag}'s default as {default or '(nothing)'}, "
                           f"--help as `{want_default}`")
            elif want_default is None and spans:
                bad.append(f"{program}: docs/flags.md:{n} gives {flag} the default {default}; --help "
                           f"prints none")
        checked += 1
    for b in bad:
        print(f"FAILED {b}")
    print(f"docs_flags: {checked} programs' --help against docs/flags.md's {len(rows)} rows: "
          f"{'ok' if not bad else f'{len(bad)} differences'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
