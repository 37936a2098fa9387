#!/usr/bin/env python3
"""How scripts/check_exercise.sh itself behaves, beyond telling right from wrong (CTest
`exercise_checker_interrupt`, `_timeout`, `_paths`, `_drill_kill`):

    python3 -m exercises.checker.checker_cases interrupt   Ctrl-C (SIGINT to the checker, then to its process
                                                 group, as a terminal sends it) on a hanging submission
                                                 ends the checker within seconds with exit 130, and
                                                 with it every process it started (mpirun's ranks
                                                 too); its temporary files are gone
    python3 -m exercises.checker.checker_cases timeout     a claim killed at DDP_CHECK_TIMEOUT is reported as
                                                 hung, and leaves no process and no temporary folder
    python3 -m exercises.checker.checker_cases paths       the reference solution passes with a space in TMPDIR,
                                                 and from a checkout and a build folder reached through
                                                 symlinks whose names hold spaces
    python3 -m exercises.checker.checker_cases drill_kill  exercises/06_fault/README.md's drill by hand on a shared
                                                 node: two participants run its commands, each from a
                                                 checkout of their own, the second started later; the
                                                 first one's kill line must kill one of the first one's
                                                 ranks, not the second one's (whose command line is the
                                                 same)

The hanging submission is step 02's own train.c, stopped for ever (pause()) once its ranks have
joined the process group. The processes are followed by pid (the checker runs in a session of its
own, and every process it starts stays in that session), never by name.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from exercises.checker.wrong_solutions import ROOT, S02, Wrong, write

CHECKER = os.path.join(ROOT, "scripts", "check_exercise.sh")
HANG = Wrong("hang", S02, [("#include <stdlib.h>\n", "#include <stdlib.h>\n#include <unistd.h>\n"),
                           ("  setup(&t);\n", "  setup(&t);\n  for (;;) pause();  // hangs in the process group\n")],
             "step02_redundant", [], "hangs for ever after joining the process group")


def stat(pid):
    """(state, ppid, session) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[3])


def running(pid):
    s = stat(pid)
    return s is not None and s[0] != "Z"


def in_session(sid):
    """The live processes of session sid."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s and s[0] != "Z" and s[2] == sid:
                out.append(int(name))
    return out


def exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


class Case:
    """The checker started on a submission, in a session of its own, with a fresh TMPDIR."""

    def __init__(self, tmp, files, env):
        self.tmpdir = os.path.join(tmp, "tmp")  # (no space: the `paths` case tests spaces)
        os.makedirs(self.tmpdir)
        self.out = open(os.path.join(tmp, "checker.out"), "w+")
        self.seen, self.shm = set(), set()
        self.p = subprocess.Popen([CHECKER, "02"] + files, stdout=self.out, stderr=subprocess.STDOUT, cwd=ROOT,
                                  env=dict(os.environ, TMPDIR=self.tmpdir, **env), start_new_session=True)

    def watch(self):
        """Records the session's processes; returns how many run the checker's build of 02_init."""
        pids = in_session(self.p.pid)
        self.seen.update(pids)
        ranks = [pid for pid in pids if exe(pid).startswith(self.tmpdir) and exe(pid).endswith("/bin/02_init")]
        joined = 0
        for pid in ranks:  # Open MPI's shared-memory files (mapped once MPI_Init is done), which mpirun removes
            try:
                with open(f"/proc/{pid}/maps") as f:
                    shm = {line.split(None, 5)[5].strip() for line in f
                           if len(line.split(None, 5)) == 6 and " /dev/shm/" in line}
            except OSError:
                shm = set()
            self.shm |= shm
            joined += bool(shm)
        return joined

    def wait_ranks(self, n, within):
        deadline = time.time() + within
        while time.time() < deadline and self.p.poll() is None:
            if self.watch() >= n:
                # A signal while mpirun is still starting its ranks can leave Open MPI's files behind
                # (seen here: TERM to mpirun within ~2 s of the ranks' start); the case is a hung job.
                time.sleep(1)
                self.watch()
                return
            time.sleep(0.1)
        raise AssertionError(f"{n} ranks of the hanging 02_init did not join within {within} s "
                             f"(checker status {self.p.poll()}):\n{self.output()}")

    def output(self):
        self.out.seek(0)
        return self.out.read()

    def problems(self):
        """Processes left running, temporary files left behind."""
        deadline = time.time() + 5  # a process that has just been killed may still be ending
        while time.time() < deadline and (in_session(self.p.pid) or any(running(p) for p in self.seen)):
            time.sleep(0.1)
        left = sorted(set(in_session(self.p.pid)) | {p for p in self.seen if running(p)})
        out = [f"process {p} ({exe(p) or '?'}) still runs" for p in left]
        out += [f"left in TMPDIR: {name}" for name in os.listdir(self.tmpdir)]
        out += [f"left behind: {path}" for path in sorted(self.shm) if os.path.exists(path)]
        return out

    def end(self):
        """Whatever happened, nothing of this case runs on (by pid and process group, TERM first)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            self.watch()
            left = [p for p in self.seen if running(p)]
            for p in left:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
            if self.p.poll() is None:
                try:
                    os.killpg(self.p.pid, sig)
                except OSError:
                    pass
            time.sleep(2 if left else 0)
        self.p.wait()


def interrupt(tmp):
    bad = []
    hang = write(HANG, os.path.join(tmp, "hang"))
    for how in ("the checker", "its process group"):
        case = Case(os.path.join(tmp, how.replace(" ", "_")), [hang], {"DDP_CLAIMS": "step02_redundant", "DDP_RUN_TIMEOUT": "300",
                                                    "DDP_CHECK_TIMEOUT": "300"})
        try:
            case.wait_ranks(2, 120)
            sent = time.time()
            if how == "the checker":
                os.kill(case.p.pid, signal.SIGINT)
            else:
                os.killpg(case.p.pid, signal.SIGINT)
            try:
                rc = case.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.time() - sent
            found = [] if rc == 130 else [f"exit status {rc} {'after' if rc is not None else 'still running after'} "
                                          f"{took:.1f} s, expected 130 within 20 s"]
            found += case.problems()
            print(f"SIGINT to {how}: exit {rc} after {took:.1f} s; {len(case.seen)} processes and "
                  f"{len(case.shm)} files in /dev/shm seen, "
                  f"{'none left' if not found else found}")
            bad += [f"SIGINT to {how}: {p}" for p in found]
        except AssertionError as e:
            bad.append(f"SIGINT to {how}: {e}")
        finally:
            case.end()
        if bad:
            print(case.output())
    return bad


def timeout(tmp):
    hang = write(HANG, os.path.join(tmp, "hang"))
    case = Case(tmp, [hang], {"DDP_CLAIMS": "step02_redundant", "DDP_RUN_TIMEOUT": "300", "DDP_CHECK_TIMEOUT": "8"})
    try:
        case.wait_ranks(2, 120)
        while case.p.poll() is None:
            case.watch()
            time.sleep(0.2)
        out = case.output()
        bad = [] if case.p.returncode == 1 else [f"exit status {case.p.returncode}, expected 1"]
        if "FAIL step02_redundant: no result after 8 s" not in out:
            bad.append("no 'FAIL step02_redundant: no result after 8 s' in the output")
        bad += case.problems()
        print(f"a claim killed at DDP_CHECK_TIMEOUT=8: exit {case.p.returncode}; {len(case.seen)} processes seen; "
              f"{'none left, TMPDIR empty' if not bad else bad}")
        if bad:
            print(out)
        return bad
    except AssertionError as e:
        return [str(e)]
    finally:
        case.end()


def paths(tmp):
    bad = []
    build = os.environ.get("DDP_BUILD_DIR", os.path.join(ROOT, "build"))
    links = os.path.join(tmp, "links")
    os.makedirs(links)
    os.symlink(ROOT, os.path.join(links, "checkout link"))
    os.symlink(os.path.realpath(build), os.path.join(links, "build link"))
    tmpdir = os.path.join(tmp, "tmp dir")
    os.makedirs(tmpdir)
    runs = [("a space in TMPDIR", ROOT, build, ["02", os.path.join(ROOT, S02)], {}),
            ("checkout and build through symlinks with spaces", os.path.join(links, "checkout link"),
             os.path.join(links, "build link"), ["03", "steps/03_sampler/sampler.c"],
             {"DDP_CLAIMS": "step03_own_binary"})]
    for what, cwd, bdir, args, env in runs:
        p = subprocess.run([os.path.join(cwd, "scripts", "check_exercise.sh")] + args, cwd=cwd, capture_output=True,
                           text=True, env=dict(os.environ, TMPDIR=tmpdir, DDP_BUILD_DIR=bdir, **env))
        out = p.stdout + p.stderr
        print(f"== {what}: scripts/check_exercise.sh {' '.join(args)} (in {cwd!r}, build {bdir!r})")
        print("   " + out.strip().replace("\n", "\n   "))
        want = ["PASS step"] + (["PASS unit tests"] if args[0] == "03" else [])
        if p.returncode != 0 or any(w not in out for w in want):
            bad.append(f"{what}: the reference solution should pass, but exit status is {p.returncode}")
        if os.listdir(tmpdir):
            bad.append(f"{what}: left in TMPDIR: {os.listdir(tmpdir)}")
    return bad


def readme_drill():
    """(the F= line, the supervised run's block, the kill's lines) of the 06_fault README's drill by hand."""
    with open(os.path.join(ROOT, "exercises", "06_fault", "README.md")) as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
    f_line = next(line for b in blocks for line in b.splitlines() if line.startswith("F="))
    supervised = next(b for b in blocks if "scripts/restart.sh" in b)
    kill = [line for b in blocks for line in b.splitlines() if line.startswith("kill -9")]
    return f_line, supervised, kill


def cwd_in(folder):
    """Live processes whose working directory is in folder."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                where = os.readlink(f"/proc/{name}/cwd")
            except OSError:
                continue
            if (where == folder or where.startswith(folder + "/")) and running(int(name)):
                out.append(int(name))
    return out


def drill_kill(tmp):
    """Two participants, A and B, each in a checkout of their own (here: a folder with scripts/ and
    work/build/bin/06_full, links to this checkout's), run the README's supervised drill; B starts once
    A has saved its first snapshot. A then runs the README's kill line, in the shell that started the
    drill when the line uses that shell's $sup, else in a second shell (a second terminal) in A's
    checkout. The kill must fail A's attempt 0, not B's."""
    build = os.environ.get("DDP_BUILD_DIR", os.path.join(ROOT, "build"))
    program = os.path.join(os.path.realpath(build), "bin", "06_full")
    f_line, supervised, kill = readme_drill()
    if not kill:
        return ["exercises/06_fault/README.md has no `kill -9 ...` line in a ```sh block"]
    env = dict(os.environ, STOP_GRACE="2", RESTART_DELAY="0.2", TMPDIR=os.path.join(tmp, "tmp"))
    os.makedirs(env["TMPDIR"])
    shells, outs = {}, {}
    # The README's runs, 1 epoch, can end in a second or two here: many epochs keep both drills running
    # until the kill (a later --epochs wins); both are stopped once it is seen.
    prelude = f"source scripts/mpi_env.sh\n{f_line}\nF=\"$F --epochs 1000\"\n"
    try:
        for who in ("A", "B"):
            home = os.path.join(tmp, who)
            os.makedirs(os.path.join(home, "work", "build", "bin"))
            os.symlink(os.path.join(ROOT, "scripts"), os.path.join(home, "scripts"))
            os.symlink(program, os.path.join(home, "work", "build", "bin", "06_full"))
            outs[who] = os.path.join(tmp, f"{who}.out")
            with open(outs[who], "w") as out:
                shells[who] = subprocess.Popen(["bash"], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                               cwd=home, env=env, text=True, start_new_session=True)
            shells[who].stdin.write(prelude + supervised + "\n")
            shells[who].stdin.flush()
            if not wait_for_text(outs[who], "saved work/ck/checkpoint.bin (epoch 0, step 20)", 120):
                return [f"participant {who}'s drill saved no snapshot at step 20 within 120 s:\n{read(outs[who])[-3000:]}"]
        print(f"A and B run the README's drill (B started after A's snapshot at step 20); A kills: {' '.join(kill)}")
        if any("$sup" in line for line in kill):  # in the shell that started A's drill
            shells["A"].stdin.write("\n".join(kill) + "\n")
            shells["A"].stdin.flush()
        else:  # from a second terminal, in A's checkout
            subprocess.run(["bash", "-c", prelude + "\n".join(kill)], cwd=os.path.join(tmp, "A"), env=env,
                           capture_output=True, timeout=60)
        failed = "restart.sh: attempt 0 failed"
        deadline = time.time() + 60
        while time.time() < deadline and not any(failed in read(outs[w]) for w in outs):
            time.sleep(0.2)
        time.sleep(1)
        hit = [w for w in outs if failed in read(outs[w])]
        print(f"attempt 0 failed for: {', '.join(hit) or 'nobody'}")
        if hit == ["A"]:
            return []
        bad = [f"A's kill line failed the drill of: {', '.join(hit) or 'nobody'}, expected A only"
               + (" (it killed a rank of B, another participant whose command line is the same)" if "B" in hit else "")]
        for w in outs:
            bad.append(f"--- {w}'s terminal:\n{read(outs[w])[-2000:]}")
        return bad
    finally:
        # restart.sh stops its attempt on SIGTERM (its ranks get TERM, mpirun ends by itself); then
        # whatever still runs in the participants' folders is killed, by pid.
        for pid in cwd_in(tmp):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"restart.sh" in f.read():
                        os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.time() + 10
        while time.time() < deadline and any("restart.sh" in cmdline(p) for p in cwd_in(tmp)):
            time.sleep(0.2)
        for pid in cwd_in(tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for sh in shells.values():
            sh.wait()


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def wait_for_text(path, text, within):
    deadline = time.time() + within
    while time.time() < deadline:
        if text in read(path):
            return True
        time.sleep(0.2)
    return False


def main():
    cases = {"interrupt": interrupt, "timeout": timeout, "paths": paths, "drill_kill": drill_kill}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        print(f"usage: {sys.argv[0]} {'|'.join(cases)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix=f"checker_{sys.argv[1]}_") as tmp:
        bad = cases[sys.argv[1]](tmp)
    if bad:
        print(f"checker_cases.py {sys.argv[1]}: the checker does not behave as it should:")
        for b in bad:
            print(f"  {b}")
        return 1
    print(f"checker_cases.py {sys.argv[1]}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
