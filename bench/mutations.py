"""Mutation check: put one deliberate bug into a copy of the tree, run the tests that claim to catch it,
and print whether they did.  A test suite that lets a listed bug through has a hole.

    ./run.sh bench mutations                 # every mutation in MUTATIONS
    ./run.sh bench mutations -k rate         # only those whose id contains "rate"
    ./run.sh bench mutations --list          # the list, nothing run

Each mutation is (id, what the bug is, file, the exact text to replace, its replacement, the tests that
must catch it).  The text must occur exactly once in the file (checked first: a stale entry is an error,
not a silent pass).  Each runs in its own copy of the tracked files (git ls-files), with the shared venv
and its own ROS_DOMAIN_ID; a mutation is "caught" when pytest exits non-zero with at least one failure.
Not part of CI (it runs the slow tests once per mutation); its table goes in the notes.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class M:
    def __init__(self, id, what, path, old, new, tests):
        self.id, self.what, self.path, self.old, self.new, self.tests = id, what, path, old, new, tests


# ------------------------------------------------------------------------------------------------
# the deliberate bugs
# ------------------------------------------------------------------------------------------------
MUTATIONS = [
    # filled in below this line: M(id, what, path, old, new, [tests])
]


def tracked_copy(dst):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if not src.is_file():
            continue
        out = dst / f
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)
    # files not yet committed but present (work in progress) are copied too
    extra = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for f in filter(None, extra):
        src = ROOT / f
        if src.is_file():
            out = dst / f
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)


def check_entry(m):
    text = (ROOT / m.path).read_text()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutation {m.id}: the text to replace occurs {n} times in {m.path} (must be 1); "
                         f"update the entry")


def run_one(m, domain, timeout):
    with tempfile.TemporaryDirectory(prefix=f"mut_{m.id}_") as d:
        d = Path(d)
        tracked_copy(d)
        f = d / m.path
        f.write_text(f.read_text().replace(m.old, m.new, 1))
        env = dict(os.environ, ROBOT_DYNAMICS_TEST_DOMAIN=str(domain), ROS_DOMAIN_ID=str(domain),
                   PYTHONPATH=str(d), PYTHONDONTWRITEBYTECODE="1")
        t0 = time.monotonic()
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                *m.tests], cwd=d, env=env, capture_output=True, text=True, timeout=timeout)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired:
            out, rc = "timeout", -1
        dt = time.monotonic() - t0
        last = [ln for ln in out.splitlines() if ln.strip()][-1:] or [""]
        caught = rc == 1 and ("failed" in last[0] or "error" in last[0])
        return caught, rc, dt, last[0][:90]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", default="", help="only mutations whose id contains this")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=900.0, help="per mutation [s]")
    ap.add_argument("--domain", type=int, default=90, help="first ROS_DOMAIN_ID used")
    a = ap.parse_args()
    muts = [m for m in MUTATIONS if a.k in m.id]
    for m in muts:
        check_entry(m)
    if a.list:
        for m in muts:
            print(f"{m.id:32s} {m.what}  [{', '.join(m.tests)}]")
        return 0
    rows = []
    for i, m in enumerate(muts):
        caught, rc, dt, last = run_one(m, a.domain + i % 10, a.timeout)
        rows.append((m, caught, rc, dt, last))
        print(f"{m.id}: {'caught' if caught else 'MISSED'} ({dt:.0f} s) {last}", flush=True)
    print()
    print("| mutation | bug | tests | result | s |")
    print("|---|---|---|---|--:|")
    for m, caught, rc, dt, last in rows:
        print(f"| {m.id} | {m.what} | {', '.join(Path(t.split('::')[0]).name for t in m.tests)} | "
              f"{'caught' if caught else '**MISSED**'} | {dt:.0f} |")
    missed = sum(not r[1] for r in rows)
    print(f"\n{len(rows) - missed} of {len(rows)} caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
