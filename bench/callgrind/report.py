"""Reads the callgrind files of bench/callgrind/run.sh and prints
instructions per task, medians over the measured runs of each variant: the
submitter's (the main thread between the "zero" and "submit" client
requests) and the pool threads' (the workers plus the monitor, whole run
with the measured flood minus the same run without it, divided by N; it
includes idle spinning). Both repeat to a fraction of an instruction
unless the threads' interleaving under valgrind made the workers park more
often (then both are higher: wake-ups), which the median of several runs
shrugs off. Then the submit path's functions by inclusive cost per task,
from the median run."""
import glob
import os
import re
import statistics
import subprocess
import sys


def totals(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return 0


def thread_of(path):
    # cg.out.PART-TID (a client-request dump) or cg.out-TID (program end)
    return int(path.rsplit("-", 1)[1])


def pool_threads_total(d):
    """Instructions of every thread but the main one, over the whole run.
    Client-request dumps cover only the calling thread, so the pool threads'
    counts are all in the end-of-program files."""
    return sum(totals(p) for p in glob.glob(os.path.join(d, "cg.out-*")) if thread_of(p) != 1)


def top_functions(path, n_tasks, limit=14):
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
        capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        ir = int(m.group(1).replace(",", ""))
        # "file:function [object]": the file part never contains "::"
        name = re.sub(r"^[^:]*:(?!:)", "", m.group(2).split(" [")[0], count=1)
        if name.startswith(("(below main)", "0x", "main", "__libc_start", "std::rt::", "std::sys::backtrace",
                            "flood_callgrind::")):
            continue
        rows.append((ir / n_tasks, name))
    return rows[:limit]


def main(out, n, batch, variants):
    n = int(n)
    print(f"\nCallgrind: instructions per task, W1 flood of {n} tasks, 2 FIXED workers "
          f"(batch variants: {batch} tasks per call)\n")
    print("| variant | submitter, Ir/task (min–max) | pool threads, Ir/task |")
    print("|---|---|---|")
    tops = []
    for v in variants:
        d = os.path.join(out, v)
        base = os.path.join(out, v + "_base")
        runs = []
        for r in sorted(glob.glob(os.path.join(d, "run*"))):
            sub = os.path.join(r, "cg.out.1-01")
            if os.path.exists(sub):
                pool = (pool_threads_total(r) - pool_threads_total(base)) / n if os.path.isdir(base) else None
                runs.append((totals(sub) / n, pool, sub))
        if not runs:
            print(f"| {v} | (no submit dump) | |")
            continue
        runs.sort(key=lambda x: x[0])
        submitter, _, median_file = runs[len(runs) // 2]
        pools = [p for _, p, _ in runs if p is not None]
        pool = statistics.median(pools) if pools else None
        spread = f" ({runs[0][0]:.1f}–{runs[-1][0]:.1f})" if len(runs) > 1 else ""
        print(f"| {v} | {submitter:.1f}{spread} | {'n/a' if pool is None else f'{pool:.1f}'} |")
        tops.append((v, top_functions(median_file, n)))
    for v, rows in tops:
        print(f"\n{v}: submit path, inclusive Ir per task")
        for ir, name in rows:
            print(f"  {ir:8.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
