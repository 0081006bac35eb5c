#!/usr/bin/env python3
"""Checks that docs/c-reference.md covers every public name of the C header.

    python3 tools/check_c_reference.py [--header include/libwspool.h] [--doc docs/c-reference.md]
    python3 tools/check_c_reference.py --self-test

The header's public names are read from include/libwspool.h:

  functions  every prototype `... wspool_name(...);` outside comments
  types      every `typedef ... wspool_name;` and `typedef ... (*wspool_name)(...)`
  constants  every `#define WSPOOL_NAME` (the include guard excepted)

An entry in the reference is:

  function   a heading whose text is the name in backticks (### `wspool_create`),
             so its anchor is the name itself (c-reference.md#wspool_create);
             its body (up to the next heading) must carry the lines
             **Errors** and **Threads**, the two things a caller must know
             beyond the signature.
  type       a heading, as for a function (no required lines).
  constant   a heading, or the first cell of a table row (| `WSPOOL_OK` | ...).

It fails naming each name without an entry, each function entry missing a
required line, and each entry naming something the header does not have
(a stale entry), and prints the coverage, e.g. "functions covered 51/51".
--self-test runs the checker on a header and a reference made up here, one
entry removed, and fails unless that entry is the one reported.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "include" / "libwspool.h"
DOC = ROOT / "docs" / "c-reference.md"
REQUIRED = ("**Errors**", "**Threads**")


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_names(text: str) -> tuple[list[str], list[str], list[str]]:
    code = strip_comments(text)
    functions: list[str] = []
    for m in re.finditer(r"^[A-Za-z_][\w \t\*]*?\b(wspool_\w+)\s*\([^;{]*\)\s*;", code, re.M):
        if m.group(0).lstrip().startswith("typedef"):
            continue
        if m.group(1) not in functions:
            functions.append(m.group(1))
    types: list[str] = []
    for m in re.finditer(
        r"typedef\b[^;{]*?\(\s*\*\s*(wspool\w*)\s*\)[^;]*;"  # function pointer
        r"|typedef\s+struct\s+\w+\s*\{.*?\}\s*(wspool\w*)\s*;"  # struct with a body
        r"|typedef\b[^;{]*?\b(wspool\w*)\s*;",  # opaque struct
        code,
        re.S,
    ):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in types:
            types.append(name)
    constants: list[str] = []
    for m in re.finditer(r"^\s*#\s*define\s+(WSPOOL_\w+)\b", code, re.M):
        if m.group(1) not in constants:
            constants.append(m.group(1))
    return functions, types, constants


def doc_entries(text: str) -> tuple[dict[str, str], set[str]]:
    """Headings that name one identifier (with their body), and table-row names."""
    headings: dict[str, str] = {}
    rows: set[str] = set()
    lines = text.splitlines()
    fenced = False
    current: str | None = None
    body: list[str] = []
    for line in lines + ["# end"]:
        if line.strip().startswith("```"):
            fenced = not fenced
        if not fenced:
            h = re.match(r"^#{1,6}\s+(.*)$", line)
            if h:
                if current is not None:
                    headings[current] = "\n".join(body)
                m = re.fullmatch(r"`((?:wspool|WSPOOL)(?:_\w+)?)`(?:\s*\(\))?", h.group(1).strip())
                current, body = (m.group(1) if m else None), []
                continue
            r = re.match(r"^\|\s*`((?:wspool|WSPOOL)(?:_\w+)?)`", line)
            if r:
                rows.add(r.group(1))
        if current is not None:
            body.append(line)
    return headings, rows


def check(header: Path, doc: Path) -> int:
    functions, types, constants = header_names(header.read_text(encoding="utf-8"))
    headings, rows = doc_entries(doc.read_text(encoding="utf-8"))
    errors: list[str] = []
    for f in functions:
        if f not in headings:
            errors.append(f"function {f}: no entry (a heading `### \\`{f}\\``)")
            continue
        for req in REQUIRED:
            if req not in headings[f]:
                errors.append(f"function {f}: its entry has no {req} line")
    for t in types:
        if t not in headings:
            errors.append(f"type {t}: no entry (a heading `### \\`{t}\\``)")
    for c in constants:
        if c not in headings and c not in rows:
            errors.append(f"constant {c}: no entry (a heading or a table row starting with `{c}`)")
    known = set(functions) | set(types) | set(constants)
    for name in sorted((set(headings) | rows) - known):
        errors.append(f"{name}: the reference has an entry but the header has no such name (stale?)")
    fc = sum(f in headings for f in functions)
    tc = sum(t in headings for t in types)
    cc = sum(c in headings or c in rows for c in constants)
    for e in errors:
        print(f"{doc.name}: {e}")
    print(f"functions covered {fc}/{len(functions)}, types covered {tc}/{len(types)}, "
          f"constants covered {cc}/{len(constants)}")
    return 1 if errors else 0


def self_test() -> int:
    header = """
/** A comment naming wspool_ghost(void); is not a prototype. */
#define WSPOOL_OK 0
#define WSPOOL_EINVAL -1
typedef struct wspool wspool;
typedef void (*wspool_fn)(void *arg);
int wspool_create(const struct wspool_config *cfg,
                  struct wspool **out);
void wspool_destroy(struct wspool *pool);
"""
    full = """
| Name | Value |
|---|---|
| `WSPOOL_OK` | 0 |
| `WSPOOL_EINVAL` | -1 |
### `wspool`
### `wspool_fn`
### `wspool_create`
**Errors** none. **Threads** any.
### `wspool_destroy`
**Errors** none. **Threads** any.
"""
    with tempfile.TemporaryDirectory() as d:
        h, r = Path(d) / "h.h", Path(d) / "r.md"
        h.write_text(header)
        r.write_text(full)
        ok = check(h, r) == 0
        # One entry removed, one entry without its **Threads** line, one stale entry.
        r.write_text(full.replace("### `wspool_destroy`\n**Errors** none. **Threads** any.\n", "")
                     .replace("**Errors** none. **Threads** any.\n", "**Errors** none.\n", 1)
                     .replace("| `WSPOOL_EINVAL` | -1 |", "| `WSPOOL_EGONE` | -1 |"))
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            failed = check(h, r) == 1
        text = out.getvalue()
        print(text, end="")
        want = ["function wspool_destroy: no entry", "function wspool_create: its entry has no **Threads**",
                "constant WSPOOL_EINVAL: no entry", "WSPOOL_EGONE: the reference has an entry but the header",
                "functions covered 1/2"]
        missing = [w for w in want if w not in text]
        if "wspool_ghost" in text:
            missing.append("(a name inside a comment was taken for a prototype)")
    if ok and failed and not missing:
        print("self-test: the checker reports a removed entry, a missing required line and a stale entry")
        return 0
    print(f"self-test FAILED: complete reference passed={ok}, broken one failed={failed}, not reported: {missing}")
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--header", type=Path, default=HEADER)
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    return check(a.header, a.doc)


if __name__ == "__main__":
    sys.exit(main())
