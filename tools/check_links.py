#!/usr/bin/env python3
"""Checks every link in the project's Markdown: relative file links must name
a file or folder that exists, and every `#anchor` (in the same file or in
another Markdown file) must match a heading there, with GitHub's rule for
heading ids. Web links (http, https, mailto) are listed, not fetched: CI runs
offline. The user docs (README, docs/, the examples' and the package's
READMEs) must also describe the product, not its history: a commit hash in
backticks or an issue number there is reported (git and CHANGELOG.md keep
the history).

    tools/check_links.py             check every tracked *.md file
    tools/check_links.py FILE...     check these files
    tools/check_links.py --self-test show that a broken anchor and a broken
                                     file link are caught, and good ones pass
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target stops at whitespace or ')'.
INLINE_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
WEB = ("http://", "https://", "mailto:")
HISTORY = re.compile(r"`[0-9a-f]{7,40}`|\bcommit [0-9a-f]{7,40}\b|\bissues? #?[0-9]+\b", re.I)
USER_DOCS = ("README.md", "docs/", "examples-c/README.md", "examples-cpp/", "bindings/python/README.md")


def slug(heading: str) -> str:
    """GitHub's heading id: the rendered text, lower-cased, without
    punctuation other than '-' and '_', spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)  # strong
    text = re.sub(r"(?<!\w)([*_])(.+?)\1(?!\w)", r"\2", text)  # emphasis
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def lines_outside_code(path: Path) -> list[tuple[int, str]]:
    out, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def anchors(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        ids: set[str] = set()
        seen: dict[str, int] = {}
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                ids.add(base if n == 0 else f"{base}-{n}")
            ids.update(HTML_ID.findall(line))
        cache[path] = ids
    return cache[path]


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in lines_outside_code(path):
        # Inline code is not a link: `[x](y)` inside backticks stays text.
        text = re.sub(r"`[^`]*`", "", line)
        found += [(number, m.group(1)) for m in INLINE_LINK.finditer(text)]
        m = REFERENCE_DEF.match(text)
        if m:
            found.append((number, m.group(1)))
    return found


def history(path: Path, root: Path) -> list[str]:
    rel = str(path.relative_to(root))
    if not rel.startswith(USER_DOCS):
        return []
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for m in HISTORY.finditer(line):
            found.append(f"{rel}:{number}: '{m.group(0)}': project history in a user doc (git and CHANGELOG.md keep it)")
    return found


def check(files: list[Path], root: Path) -> tuple[list[str], int, int]:
    """Returns (problems, links checked, web links skipped)."""
    problems, checked, web = [], 0, 0
    cache: dict[Path, set[str]] = {}
    for path in files:
        problems += history(path, root)
        for number, target in links(path):
            where = f"{path.relative_to(root)}:{number}"
            if target.startswith(WEB):
                web += 1
                continue
            checked += 1
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if file_part:
                try:
                    dest.relative_to(root)
                except ValueError:
                    problems.append(f"{where}: {target}: points outside the repository")
                    continue
                if not dest.exists():
                    problems.append(f"{where}: {target}: no such file")
                    continue
            if anchor:
                if dest.is_dir() or dest.suffix.lower() != ".md":
                    problems.append(f"{where}: {target}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(dest, cache):
                    near = sorted(a for a in anchors(dest, cache) if a[:6] == anchor[:6])[:3]
                    hint = f" (headings there with that start: {', '.join(near)})" if near else ""
                    problems.append(f"{where}: {target}: no heading with id '{anchor}' in {dest.relative_to(root)}{hint}")
    return problems, checked, web


def tracked_markdown() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT, capture_output=True, check=True)
    names = [n for n in out.stdout.decode().split("\0") if n]
    return [ROOT / n for n in names if (ROOT / n).exists()]


def self_test() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "guide.md").write_text(
            "# Guide\n\n## Stats: `completed` and *queued*\n\n## Stats: `completed` and *queued*\n\n"
            "```md\n[inside a fence](nowhere.md)\n```\n"
        )
        (root / "README.md").write_text(
            "# Top\n\n"
            "[good file](docs/guide.md) [good anchor](docs/guide.md#stats-completed-and-queued)\n"
            "[second heading of that name](docs/guide.md#stats-completed-and-queued-1) [here](#top)\n"
            "[web](https://example.com/x#y) `[code](not-a-link.md)`\n"
            "[broken anchor](docs/guide.md#stats-completed) [broken file](docs/gone.md)\n"
            "[broken local anchor](#nothing-here)\n"
            "Since commit `abc1234` (issue 29) it is faster; 0x1234567 and deadbeefs are not hashes.\n"
        )
        problems, checked, web = check([root / "README.md", root / "docs" / "guide.md"], root)
    expected = ["#stats-completed", "docs/gone.md", "#nothing-here", "`abc1234`", "issue 29"]
    caught = [e for e in expected if any(e in p for p in problems)]
    ok = len(problems) == 5 and caught == expected and checked == 7 and web == 1
    for p in problems:
        print(f"  self-test caught: {p}")
    print(f"check_links self-test: {'ok' if ok else 'FAILED'} ({checked} links checked, {len(problems)} problems, as planted: 5)")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--self-test"]:
        return self_test()
    files = [Path(a).resolve() for a in argv] if argv else tracked_markdown()
    problems, checked, web = check(files, ROOT)
    for p in problems:
        print(p)
    print(
        f"check_links: {checked} links in {len(files)} Markdown files, {len(problems)} problems; "
        f"{web} web links not fetched"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
