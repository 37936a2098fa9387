#!/usr/bin/env python3
"""CTest `docs_quotes` (label docs): every C line the docs quote exists in the code.

The docs never paste step code, but they quote single lines (CONTRIBUTING.md), and a quote goes stale
when the line changes. A quoted C line is an inline code span in docs/*.md that ends with `;` (a
statement) or carries a course tag comment (`// [ddp] ...`). Each must appear, with runs of blanks
made one, inside one line of a .c or .h file under steps/ or common/. A span with an ellipsis (`…`)
is checked piece by piece: every piece must be in the same line, in order.

Usage: tests/integration/docs_quotes.py [ROOT]   exit 1 naming every quote not found (file:line)

CTest `docs_pastes` (label docs): `docs_quotes.py --pastes [ROOT]` re-runs the command of every pasted
output that a chapter marks, and fails where a pasted line no longer matches. A marked paste is a
```text block right after a line `<!-- paste: COMMAND -->` (`A && B` for two commands whose output
follows one another). COMMAND must also be a command the chapter shows (a ```sh block or a `$ ` line,
continuation lines joined), so that the marker cannot drift from the text. It runs with bash in a
scratch folder that links the repository's files, with `build/bin` pointing at DDP_BIN_DIR and an empty
`out/` (one folder per chapter, so that a paste may show what an earlier run wrote); its stdout and stderr, together, are compared with the paste line by line (`$ ` lines and their
continuations are the command, not output; a line `…` stands for any number of lines):
- timing figures are masked (samples/s, ms/step, ETA, GFLOP/s, MFU, the metrics' "time",
  "samples_per_s" and "gflops"), and so are the metrics' "peak_rss_kib" and the host name of the
  `ranks:` line;
- where the run's BLAS (its start-up line `blas: LIBRARY VERSION, kernel K, ...`) is the one the docs
  name (docs/README.md, "its BLAS: LIBRARY VERSION, kernel K"), everything else must be equal:
  losses, accuracies, digests;
- on any other kernel the GEMMs add in another order (another blocking, other FMA use), so the
  parameters differ in their last bits and training amplifies that every step: no value a run computes
  can be compared with the paste by any tolerance that holds for every kernel (a guessed one failed:
  chapter 01's loss at step 150, 0.1932 on Haswell, is 0.1996 on Prescott). So the comparison is of
  structure only, what no kernel changes: every line's shape (its words and punctuation), every
  integer (steps, epochs, samples, parameters, bytes, ranks), and which digests are equal (two ranks
  whose pasted digests are equal must print equal digests, two that differ must differ); decimals and
  the digests' values are masked, and so is the `blas:` line (a build without OpenBLAS prints `blas:
  none, ...`) and the start-up warning of a generic fallback kernel (chapter 01). What holds on
  every kernel about the values themselves, the parity of the programs within float32 rounding, is
  proved by the `parity` tests, one step at a time.
`--selftest` checks the comparison itself on a stale line (no program runs); `--pastes` runs it first.
`--only=TEXT` re-runs the pastes of the chapters whose file name contains TEXT (`--only=08`).
`--pastes --write` rewrites each paste with its run's output where its structure still matches (its
`$ ` lines and `…` kept; timings and all): how the pastes are made again after a change of the
docs' BLAS (docs/README.md names it), on a machine that runs that BLAS.
Never sets OPENBLAS_CORETYPE: the kernel is whatever this machine's OpenBLAS picks.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).parents[2]
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def norm(s):
    return re.sub(r"\s+", " ", s.strip())


def is_c_line(span):
    s = span.strip()
    return s.endswith(";") or re.search(r"//\s*\[[a-z]+\]", s) is not None


code_lines = []


def read_code():
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



def check_quotes():
    read_code()
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
    return 1 if missing else 0


# ---- pasted outputs (--pastes) ------------------------------------------------------------------------
MARK = re.compile(r"^<!-- paste: (.+) -->$")
TIMING = [
    (re.compile(r"\d+ samples/s"), "N samples/s"),
    (re.compile(r"[\d.]+ ms/step"), "N ms/step"),
    (re.compile(r"ETA [\d:-]+"), "ETA T"),
    (re.compile(r"[\d.]+ GFLOP/s"), "N GFLOP/s"),
    (re.compile(r"MFU [\d.]+%"), "MFU N%"),
    (re.compile(r'"(time|samples_per_s|gflops|peak_rss_kib)":[-+\d.eE]+'), r'"\1":N'),
    (re.compile(r"^((?:\[default\d+\]:)?ranks: )\S+"), r"\1HOST"),
]
KERNEL_DEPENDENT = [
    (re.compile(r"param_digest\W+[0-9a-f]{16}"), "param_digest D"),
    (re.compile(r"^((?:\[default\d+\]:)?blas: ).*"), r"\1B"),  # another kernel, or a build without OpenBLAS
]
FALLBACK = re.compile(r"^(?:\[default\d+\]:)?blas: kernel \S+ is a generic fallback")


DIGEST = re.compile(r"[0-9a-f]{16}")
DECIMAL = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def mask(line, same_kernel):
    for pat, rep in TIMING + ([] if same_kernel else KERNEL_DEPENDENT):
        line = pat.sub(rep, line)
    return line.rstrip()


def shape(line):
    """A line as structure: timings, the blas line, decimals and digests masked; integers kept."""
    line = mask(line, False).replace("param_digest D", "param_digest")
    return DECIMAL.sub("F", DIGEST.sub("D", line))


def same_line(pasted, got, same_kernel):
    """Whether an output line matches a pasted one (see the module's docstring): equal but for timings
    on the docs' kernel; of the same shape on another."""
    if same_kernel:
        return mask(pasted, True) == mask(got, True)
    return shape(pasted) == shape(got)


def same_digests(pairs):
    """None when the digests of matched lines, (pasted, got) pairs, are equal in the run exactly where
    they are equal in the paste; else what differs."""
    seen, back = {}, {}
    for a, b in pairs:
        if seen.setdefault(a, b) != b or back.setdefault(b, a) != a:
            return (f"the paste's digests {a} and its partners are equal where the run's {b} and "
                    f"{seen[a] if seen[a] != b else back[b]} are not, or the other way round: the ranks' "
                    "replicas are not alike as the paste shows")
    return None


def align(pasted, got, same_kernel):
    """(the output line each pasted line matches, or None for a `…`; None) when `got` matches `pasted`,
    else (None, what differs)."""
    j, at = 0, []
    for i, p in enumerate(pasted):
        if p.strip() in ("…", "..."):
            at.append(None)
            nxt = next((q for q in pasted[i + 1:] if q.strip() not in ("…", "...")), None)
            if nxt is None:
                j = len(got)
                break
            while j < len(got) and not same_line(nxt, got[j], same_kernel):
                j += 1
            if j == len(got):
                return None, f"no output line matches {nxt!r} (after the …)"
            continue
        if j >= len(got):
            return None, f"the output ends before the pasted line {p!r}"
        if not same_line(p, got[j], same_kernel):
            return None, f"pasted line {i + 1} {p!r}\n    the run printed {got[j]!r}"
        at.append(j)
        j += 1
    if j < len(got):
        return None, f"the run printed more lines than the paste, from {got[j]!r}"
    return at, None


def compare(pasted, got, same_kernel):
    """None when the output lines `got` match the pasted lines, else what differs."""
    at, diff = align(pasted, got, same_kernel)
    if diff or same_kernel:
        return diff
    pairs = [pq for i, j in enumerate(at) if j is not None for pq in zip(DIGEST.findall(pasted[i]), DIGEST.findall(got[j]))]
    return same_digests(pairs)


def rewrite(lines, n, got):
    """--write: the chapter's lines with the paste whose marker is line n (1-based) holding the run's
    output `got`, line for line where the paste's structure matches (its `$ ` lines and its `…` kept);
    None when the structure does not match (a change to fix by hand)."""
    k, body = n + 1, []
    while not lines[k].startswith("```"):
        body.append(k)
        k += 1
    out, cont = [], False  # the indices in `lines` of the output lines (not the `$ command` lines)
    for b in body:
        if lines[b].startswith("$ ") or cont:
            cont = lines[b].rstrip().endswith("\\")
            continue
        out.append(b)
    at, diff = align([lines[b] for b in out], got, False)
    if diff:
        return None
    new = list(lines)
    for b, j in zip(out, at):
        if j is not None:
            new[b] = got[j]
    return new


def shell_commands(text):
    """Every command the chapter shows: ```sh blocks and `$ ` lines, continuations joined."""
    cmds, in_sh, in_fence, cur = set(), False, False, ""
    for line in text.splitlines():
        s_ = line.strip()
        if s_.startswith("```"):
            in_fence, in_sh = not in_fence, (not in_fence and s_ in ("```sh", "```bash"))
            cur = ""
            continue
        if not in_fence:
            continue
        if cur or in_sh or s_.startswith("$ "):
            piece = s_[2:] if not cur and s_.startswith("$ ") else s_
            piece = piece.split("   #")[0].strip() if " #" in piece else piece
            if piece.endswith("\\"):
                cur += piece[:-1] + " "
                continue
            full = norm(cur + piece)
            cur = ""
            if full:
                cmds.add(full)
                cmds.update(norm(c) for c in full.split(" && "))
    return cmds


def pastes(md):
    """[(line number, command, pasted lines)] of a chapter's marked pastes."""
    lines, out = md.read_text().splitlines(), []
    for n, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        if n + 1 >= len(lines) or not lines[n + 1].startswith("```"):
            out.append((n + 1, m.group(1), None))
            continue
        body, k = [], n + 2
        while k < len(lines) and not lines[k].startswith("```"):
            body.append(lines[k])
            k += 1
        shown, cont = [], False  # drop the `$ command` lines and their continuations
        for b in body:
            if b.startswith("$ ") or cont:
                cont = b.rstrip().endswith("\\")
                continue
            shown.append(b)
        out.append((n + 1, m.group(1), shown))
    return out


def docs_kernel():
    """The BLAS the docs' outputs came from, as docs/README.md names it ("its BLAS: OpenBLAS 0.3.34.481.3,
    kernel SkylakeX"): the library, its version and its kernel, since two versions' kernels of one name
    need not add in the same order."""
    m = re.search(r"its BLAS:\s+`?(\S+ \S+, kernel \w+)", (root / "docs" / "README.md").read_text())
    return m.group(1) if m else None


def run_kernel(output):
    """The BLAS a run names in its start-up line (`blas: OpenBLAS 0.3.34.481.3, kernel SkylakeX, 1 thread`)."""
    m = re.search(r"^(?:\[default\d+\]:)?blas: (\S+ \S+, kernel \S+),", output, re.M)
    return m.group(1) if m else None


def scratch(tmp):
    """A folder that looks like the repository root: its files linked, build/bin the binaries, out/."""
    import os
    for entry in root.iterdir():
        if entry.name not in ("build", "out", ".git"):
            os.symlink(entry, os.path.join(tmp, entry.name))
    os.makedirs(os.path.join(tmp, "build"))
    os.symlink(os.environ.get("DDP_BIN_DIR", str(root / "build" / "bin")), os.path.join(tmp, "build", "bin"))
    os.makedirs(os.path.join(tmp, "out"))


def check_pastes():
    import shutil
    import subprocess
    import tempfile
    import time
    if selftest():
        return 1
    if not shutil.which("mpirun"):
        print("skipped: the chapters' multi-rank runs need mpirun")
        return 77
    want = docs_kernel()
    failed = ran = 0
    kernel_seen = None  # a paste without a start-up line (a grep of a metrics file) keeps the last run's
    only = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), "")
    write = "--write" in sys.argv
    for md in sorted((root / "docs").glob("*.md")):
        if only not in md.name:
            continue
        text = md.read_text()
        lines = text.splitlines()
        shown = shell_commands(text)
        marked = pastes(md)
        if not marked:
            continue
        with tempfile.TemporaryDirectory(prefix="docs-pastes-") as tmp:
            scratch(tmp)  # one folder per chapter: a later paste may read what an earlier run wrote
            for n, cmd, pasted in marked:
                where = f"{md.relative_to(root)}:{n}"
                if pasted is None:
                    print(f"{where}: a paste marker must be followed by a ``` block")
                    failed += 1
                    continue
                missing = [c for c in cmd.split(" && ") if norm(c) not in shown]
                if missing:
                    print(f"{where}: the marked command is not one the chapter shows: {missing[0]!r}")
                    failed += 1
                    continue
                t0 = time.time()
                p = subprocess.run(["bash", "-c", cmd], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=300)
                ran += 1
                # the warning for a generic fallback kernel belongs to this machine, not to the paste
                got = [g for g in p.stdout.splitlines() if not FALLBACK.match(g)]
                kernel = run_kernel(p.stdout) or kernel_seen
                kernel_seen = kernel
                same = kernel is not None and kernel == want
                if write:
                    new = rewrite(lines, n, got)
                    if new is None:
                        failed += 1
                        print(f"{where}: NOT WRITTEN, its structure changed (edit it by hand): {cmd}")
                    else:
                        lines = new
                        md.write_text("\n".join(lines) + "\n")
                        print(f"{where}: written ({kernel}): {cmd}")
                    continue
                diff = compare(pasted, got, same)
                how = "exact" if same else f"kernel {kernel}, not the docs' {want}: structure only"
                if diff:
                    failed += 1
                    print(f"{where}: FAIL ({how}; {time.time() - t0:.1f} s): {cmd}\n    {diff}")
                    print("    --- the run printed:\n    " + "\n    ".join(got[-40:]))
                else:
                    print(f"{where}: ok ({how}; {time.time() - t0:.1f} s, {len(pasted)} lines)")
                    if not same:  # what the other kernel changed, which structure does not compare
                        changed = sum(1 for a, b in zip(pasted, got) if mask(a, True) != mask(b, True))
                        print(f"    {changed} line(s) differ in value from the paste on this kernel")
    print(f"docs_pastes: {ran} pasted outputs re-run, {failed} stale")
    if ran == 0:
        print("no marked paste found: the markers are `<!-- paste: COMMAND -->`")
        return 1
    return 1 if failed else 0


def selftest():
    """The comparison catches a stale line, and only that (returns the number of failures)."""
    now = ["epoch 1/2  step 50/158  loss 0.4681  3724 samples/s  34.4 ms/step  ETA 00:04  13.73 GFLOP/s",
           "blas: OpenBLAS 0.3.34.481.3, kernel SkylakeX, 1 thread", "ranks: node7 0-1 (local 0-1)",
           "done: 158 steps, param_digest 0291fedd2f555641"]
    cases = [  # (pasted, same kernel, should match)
        (["epoch 1/2  step 50/158  loss 0.4681  99 samples/s  1.0 ms/step  ETA 01:00  2.00 GFLOP/s"] + now[1:], True, True),
        (now[:1] + ["blas: OpenBLAS 0.3.34.481.3, kernel SkylakeX, 1 thread", "ranks: vm 0-1 (local 0-1)"] + now[3:], True, True),
        (["epoch 1/2  step 50/158  loss 0.4681  3724 samples/s  34.4 ms/step  ETA 00:04"] + now[1:], True, False),
        (now[:3] + ["done: 158 steps, param_digest f29e20f22655a283"], True, False),
        (now[:3] + ["done: 158 steps, param_digest f29e20f22655a283"], False, True),
        (["epoch 1/2  step 50/158  loss 0.4683  3724 samples/s  34.4 ms/step  ETA 00:04  13.73 GFLOP/s"] + now[1:], False, True),
        # another kernel: structure only, so another loss is the same line, another step count is not
        (["epoch 1/2  step 50/158  loss 0.5681  3724 samples/s  34.4 ms/step  ETA 00:04  13.73 GFLOP/s"] + now[1:], False, True),
        (["epoch 1/2  step 50/158  loss 0.4681 3724 samples/s  34.4 ms/step  ETA 00:04  13.73 GFLOP/s"] + now[1:], False, False),
        (["epoch 1/2  step 51/158  loss 0.4681  3724 samples/s  34.4 ms/step  ETA 00:04  13.73 GFLOP/s"] + now[1:], False, False),
        (now[1:], True, False),
        (now[:1] + ["…"] + now[3:], True, True),
        (now[:1] + ["blas: none, plain C GEMMs (built without OpenBLAS: several times slower)"] + now[2:], False, True),
        (now[:1] + ["blas: OpenBLAS 0.3.34.481.3, kernel SkylakeX, 2 threads"] + now[2:], True, False),
    ]
    d1, d2 = "0291fedd2f555641", "f29e20f22655a283"
    two = [f'{{"type":"final","world_size":2,"steps":158,"param_digest":"{d}"}}' for d in (d1, d1)]
    cases += [  # (pasted, same kernel, should match, the run's lines): digests equal where the paste's are
        ([t.replace(d1, d2) for t in two], False, True, two),
        ([two[0], two[1].replace(d1, d2)], False, False, two),
        (two, False, False, [two[0], two[1].replace(d1, d2)]),
        ([t.replace('"steps":158', '"steps":157') for t in two], False, False, two),
    ]
    bad = 0
    for i, (pasted, same, ok, *run) in enumerate(cases):
        if (compare(pasted, run[0] if run else now, same) is None) != ok:
            print(f"selftest case {i}: the comparison {'refused' if ok else 'accepted'} {pasted}")
            bad += 1
    print(f"docs_pastes selftest: {len(cases)} cases, {bad} wrong")
    return bad


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        root = pathlib.Path(args[0])
    if "--selftest" in sys.argv:
        sys.exit(1 if selftest() else 0)
    sys.exit(check_pastes() if "--pastes" in sys.argv else check_quotes())
