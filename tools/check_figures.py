#!/usr/bin/env python3
"""Flags measured figures in the docs that do not say where they come from.

    python3 tools/check_figures.py [--list] [--update-baseline]
    python3 tools/check_figures.py --self-test

Rule: measured figures live in docs/benchmarks.md, each under the command
that produces it; other docs state rules and link there. A paragraph (or
table row, or list item) of README.md or docs/*.md, other than
benchmarks.md, that carries a measured-looking figure -- a number with a
time unit (ns, µs, us, ms), a rate (M/s, k/s, tasks/s, req/s), a memory size
in MiB/MB/GB, an instruction count, a ratio (1.5×, 0.50x) or a percentage --
must link to benchmarks.md or name the `make bench...` command that measures
it, itself or in its section or an enclosing one (a table under "One run
of `make bench-rust`", or under a #### heading inside a "## Figures" section
that names its command, is sourced by that line). Limits and settings are not figures: a number right after "default",
"at most", "at least", "minimum", "maximum", "cap", "up to", "limit",
"timeout", "deadline", "target", "interval", "after", "every" or "=" is
skipped, and so are KiB sizes (stack minimums, line limits) and code.

Paragraphs that break the rule today are listed, by file and a hash of
their text, in tools/figures_baseline.txt: they are known debts (figures
still to move to benchmarks.md) and do not fail the check; any other one
does, and so does a baseline entry that no longer matches (remove it:
--update-baseline rewrites the file). So the list only shrinks.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tools" / "figures_baseline.txt"
SKIP_FILES = {"benchmarks.md", "CHANGELOG.md"}

NUM = r"(?<![\w.])(\d[\d,]*(?:\.\d+)?(?:[–-]\d[\d,]*(?:\.\d+)?)?)"
UNIT = re.compile(
    NUM + r"\s?(?:(ns|µs|us|ms)\b|(M|k)?\s?(?:tasks|req|calls|round trips)?/s\b|(MiB|MB|GB)\b|"
    r"(instructions|instr)\b|(×|x)(?!\w)|(%))"
)
LIMIT_WORDS = re.compile(
    r"(default|at most|at least|minimum|maximum|min|max|cap|capped at|up to|limit|timeout|deadline|target|"
    r"interval|after|every|=|of|below|above|than|within|in|is|are|≤|≥|<|>)[\s,:`(]*$",
    re.I,
)
SOURCED = re.compile(r"benchmarks\.md|make (?:bench|test)[\w-]*|cargo (?:run|bench)\b[^`]*-p wspool-bench")


def paragraphs(path: Path) -> list[tuple[int, str, int]]:
    """(first line, text, section number) of each paragraph, list item or table row outside code."""
    out: list[tuple[int, str, int]] = []
    section = 0
    parents: dict[int, list[int]] = {0: []}  # section -> its enclosing sections
    stack: list[tuple[int, int]] = [(0, 0)]  # (heading level, section)
    cur: list[str] = []
    start = 0
    fenced = False

    def flush() -> None:
        if cur:
            out.append((start, " ".join(cur), section))
            cur.clear()

    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        s = line.strip()
        if not s or s.startswith("#"):
            flush()
            if s.startswith("#"):
                level = len(s) - len(s.lstrip("#"))
                while stack and stack[-1][0] >= level:
                    stack.pop()
                section += 1
                parents[section] = [sec for _, sec in stack]
                stack.append((level, section))
            continue
        if s.startswith("|") or re.match(r"^([-*]|\d+\.)\s", s):
            flush()
        if not cur:
            start = i
        cur.append(s)
        if s.startswith("|"):
            flush()
    flush()
    paragraphs.parents = parents  # type: ignore[attr-defined]
    return out


def figures(text: str) -> list[str]:
    text = re.sub(r"`[^`]*`", " ", text)  # code spans: names, commands, constants
    found = []
    for m in UNIT.finditer(text):
        before = text[: m.start()]
        if LIMIT_WORDS.search(before[-24:]):
            continue
        found.append(m.group(0))
    return found


def key(path: Path, text: str) -> str:
    rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    return f"{rel} {hashlib.sha1(text.encode()).hexdigest()[:12]}"


def offenders(files: list[Path]) -> list[tuple[str, str, int, list[str]]]:
    out = []
    for f in files:
        paras = paragraphs(f)
        parents = paragraphs.parents  # type: ignore[attr-defined]
        sourced = {sec for _, text, sec in paras if SOURCED.search(text)}
        for line, text, sec in paras:
            figs = figures(text)
            if figs and sec not in sourced and not sourced.intersection(parents.get(sec, [])):
                out.append((key(f, text), str(f), line, figs))
    return out


def default_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [f for f in files if f.name not in SKIP_FILES]


def check(files: list[Path], baseline: Path, show_all: bool = False) -> int:
    known = set(baseline.read_text().split("\n")) - {""} if baseline.exists() else set()
    known = {k for k in known if not k.startswith("#")}
    found = offenders(files)
    new = [o for o in found if o[0] not in known]
    stale = sorted(known - {o[0] for o in found})
    for k, f, line, figs in found if show_all else new:
        print(f"{f}:{line}: measured figure(s) {', '.join(figs[:4])} without a link to benchmarks.md "
              f"or its `make bench...` command")
    for k in stale:
        print(f"{baseline.name}: {k} matches no paragraph any more: remove it (--update-baseline)")
    print(f"figures: {len(found)} unsourced paragraph(s), {len(found) - len(new)} of them known debts "
          f"in {baseline.name}, {len(new)} new")
    return 1 if new or stale else 0


def self_test() -> int:
    doc = (
        "# Speed\n\nThe pool is fast: 12.4 M tasks/s on one run.\n\n"
        "# Linked\n\nThe flood reaches 12.4 M tasks/s ([benchmarks.md](benchmarks.md)).\n\n"
        "# Limits\n\nThe default spin cap is 500 µs; the stack minimum is 64 KiB; at most 16 in a row.\n\n"
        "# Memory\n\n`make bench-memory` shows 3.3 MiB once idle.\n\n"
        "## Results\n\nOne run of `make bench-rust`:\n\n| flood | 12.4 M tasks/s |\n"
    )
    with tempfile.TemporaryDirectory() as d:
        f, b = Path(d) / "doc.md", Path(d) / "baseline.txt"
        f.write_text(doc)
        b.write_text("")
        found = offenders([f])
        ok = [o[2] for o in found] == [3]
        b.write_text(found[0][0] + "\n" if found else "")
        ok = ok and check([f], b) == 0  # a known debt passes
        b.write_text("doc.md 000000000000\n")
    if ok:
        print("self-test: an unsourced figure is flagged; a linked one, a limit and a commanded one are not")
        return 0
    print(f"self-test FAILED: {found}")
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--list", action="store_true", help="list every unsourced paragraph, known debts included")
    ap.add_argument("--update-baseline", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    files = default_files()
    if a.update_baseline:
        found = offenders(files)
        BASELINE.write_text(
            "# Paragraphs with measured figures that neither link to docs/benchmarks.md nor name\n"
            "# their command (tools/check_figures.py). Known debts: move each figure to\n"
            "# benchmarks.md or link it, then drop its line. Never add lines by hand.\n"
            + "".join(sorted({o[0] + "\n" for o in found}))
        )
        print(f"{BASELINE.name}: {len(found)} entries")
        return 0
    return check(files, BASELINE, a.list)


if __name__ == "__main__":
    sys.exit(main())
