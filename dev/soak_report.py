#!/usr/bin/env python3
"""dev/soak.sh's report: reads the JUnit files of its runs (DIR/run<i>.xml, written by ctest
--output-junit) and prints each test that failed, in how many runs, with the output of its last
failure; the retries the tests counted (lines starting `RETRY:` in their output); and the slowest
tests by their median time. Exit status 0 when every run passed whole.

Usage: dev/soak_report.py DIR RUNS
"""
import collections
import os
import statistics
import sys
import xml.etree.ElementTree as ET


def read_run(path):
    """{test name: (status, seconds, output)} of one run; None when the file is missing (a run that
    did not reach its end)."""
    if not os.path.exists(path):
        return None
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        status = case.get("status") or "run"
        if case.find("failure") is not None or case.find("error") is not None:
            status = "fail"
        elif case.find("skipped") is not None:
            status = "skipped"
        text = "".join(e.text or "" for e in case if e.tag in ("system-out", "system-err", "failure"))
        out[case.get("name")] = (status, float(case.get("time") or 0), text)
    return out


def main():
    folder, runs = sys.argv[1], int(sys.argv[2])
    results = [read_run(os.path.join(folder, f"run{i}.xml")) for i in range(1, runs + 1)]
    failed, last_out, retries, times = collections.Counter(), {}, collections.Counter(), collections.defaultdict(list)
    whole = 0
    for i, r in enumerate(results, 1):
        if r is None:
            print(f"run {i}: no results (it did not finish)")
            continue
        bad = [n for n, (s, _, _) in r.items() if s == "fail"]
        whole += not bad
        print(f"run {i}: {len(r)} tests, {len(bad)} failed"
              f"{', ' + str(sum(1 for s, _, _ in r.values() if s == 'skipped')) + ' skipped' if r else ''}")
        for name, (status, secs, text) in r.items():
            times[name].append(secs)
            retries[name] += sum(1 for line in text.splitlines() if line.lstrip().startswith("RETRY:"))
            if status == "fail":
                failed[name] += 1
                last_out[name] = text
    if failed:
        print("\nfailed tests (runs failed / runs):")
        for name, count in failed.most_common():
            print(f"  {name}: {count}/{runs}")
        for name, _ in failed.most_common():
            print(f"\n---- {name}: the output of its last failure (last 60 lines)")
            print("\n".join(last_out[name].splitlines()[-60:]))
    retried = {n: c for n, c in retries.items() if c}
    print("\nretries counted (RETRY: lines):", ", ".join(f"{n} {c}" for n, c in sorted(retried.items())) or "none")
    slow = sorted(times.items(), key=lambda kv: -statistics.median(kv[1]))[:20]
    print("\nslowest 20 tests (median s over the runs):")
    for name, t in slow:
        print(f"  {statistics.median(t):7.1f}  {name}")
    print(f"\nsoak: {whole} of {runs} runs passed whole")
    return 0 if whole == runs else 1


if __name__ == "__main__":
    sys.exit(main())
