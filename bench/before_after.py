"""One benchmark, two revisions, in one run: the revision given (default: the last commit before the
control cycle became a pipeline of stages) and the working tree, run alternately in rounds so that both
see the same machine; prints each table cell's median over the rounds, before and after.

    .venv/bin/python bench/before_after.py [--rev 2333e88] [--bench control_loop] [--rounds 3] [-- ARGS]
        # ARGS go to the benchmark (e.g. -- --n 20000); node_step works too (--bench node_step)

The old revision is exported with `git archive` into a temporary folder and its benchmark run there
with this venv's python (each benchmark puts its own tree first on sys.path, so each imports its own
robot_dynamics).  Cells are the benchmark's "| row | a / b / c | ..." tables; the number compared is the
first of each cell (the median, in the benchmarks that print median / p99 / max).
"""
import argparse
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = "2333e88"          # main before issue 40's refactor (the loop as one 1660-line class)


def export(rev, dest):
    data = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    tmp = Path(dest) / "tree.tar"
    tmp.write_bytes(data)
    with tarfile.open(tmp) as t:
        t.extractall(dest, filter="data")
    tmp.unlink()


def table(out):
    """{(row, column): [numbers of the cell]} and the header, from the first markdown table printed."""
    cells, header = {}, None
    for ln in out.splitlines():
        if not ln.startswith("|") or set(ln) <= set("|-: "):
            continue
        parts = [p.strip() for p in ln.strip("|").split("|")]
        if header is None:
            header = parts
            continue
        for col, cell in zip(header[1:], parts[1:]):
            nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", cell)]
            if nums:
                cells[(parts[0], col)] = nums
    return cells, header


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default=BASE)
    ap.add_argument("--bench", default="control_loop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    runs = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="before_after_") as d:
        export(a.rev, d)
        trees = {"before": Path(d), "after": ROOT}
        for r in range(a.rounds):
            for which in (("before", "after") if r % 2 == 0 else ("after", "before")):
                tree = trees[which]
                out = subprocess.run([sys.executable, str(tree / "bench" / f"{a.bench}.py"), *a.args], cwd=tree,
                                     capture_output=True, text=True, check=True).stdout
                runs[which].append(table(out)[0])
                print(f"round {r + 1} {which} done", file=sys.stderr, flush=True)
    keys = [k for k in runs["after"][0] if all(k in t for t in runs["before"] + runs["after"])]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    print(f"bench/{a.bench}.py {' '.join(a.args)}: before = {a.rev}, after = the working tree at {head}; "
          f"median of {a.rounds} alternating rounds of each cell's first number\n")
    print("| row | column | before | after | change |")
    print("|---|---|---|---|---|")
    for k in keys:
        b = statistics.median(t[k][0] for t in runs["before"])
        f = statistics.median(t[k][0] for t in runs["after"])
        ch = f"{100.0 * (f - b) / b:+.1f} %" if b else "-"
        print(f"| {k[0]} | {k[1]} | {b:.2f} | {f:.2f} | {ch} |")


if __name__ == "__main__":
    main()
