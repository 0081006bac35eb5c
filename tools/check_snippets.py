#!/usr/bin/env python3
"""Builds and runs every Rust, C, C++ and Python code block of the docs.

    python3 tools/check_snippets.py [--python .venv/bin/python] [FILE.md ...]
    python3 tools/check_snippets.py --self-test

Default files: README.md, docs/**/*.md, examples-c/README.md. Each fenced
block tagged rust, c, cpp or python is copied into a scratch project under
target/snippets/ and built and run there:

  rust    a scratch cargo project depending on core/ by path and on tokio (as
          the workspace declares it: a current-thread runtime and timers), one
          binary per block, built with -D warnings. A block without `fn main` is wrapped
          in `fn main() -> Result<(), Box<dyn std::error::Error>> { ... Ok(()) }`,
          as rustdoc does, so it may use `?`.
  c       a complete program, compiled with -Wall -Wextra -Werror against
          include/ and target/release/libwspool.so (make c-build), then run.
  cpp     the same as C++17 (g++ -std=c++17 -Wall -Wextra -Werror), with
          include/wspool.hpp on the include path; as C++20 when the line
          right before its fence is the marker
              <!-- snippet: c++20 -->
  python  run with the given interpreter (the venv of `make python-install`).

Every run has a time limit. A block that is not meant to run (a signature,
a fragment) carries the marker
    <!-- snippet: not-run (why) -->
on the line right before its fence; use it sparingly. Blocks in other
languages (sh, toml, text, cmake) are not run.

--self-test feeds the checker one broken block per language and fails unless
each is reported, so a checker that passes everything cannot go unnoticed;
and a valid C++20-only block under the c++20 marker, which must pass.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "target" / "snippets"
LANGS = {"rust", "c", "cpp", "python"}
SKIP = re.compile(r"<!--\s*snippet:\s*not-run\s*\((.+)\)\s*-->")
CXX_STD = re.compile(r"<!--\s*snippet:\s*c\+\+(\d\d)\s*-->")
FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)")
RUN_TIMEOUT = 120


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None
    cxx_std: str = "c++17"  # cpp blocks: the -std= they are compiled with

    @property
    def name(self) -> str:
        rel = self.path.resolve().relative_to(ROOT) if self.path.resolve().is_relative_to(ROOT) else self.path
        return re.sub(r"[^A-Za-z0-9]+", "_", f"{rel}_{self.line}").strip("_").lower()

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Failure:
    where: str
    lang: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.lang} block {self.what}"


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2).lower(), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        sk = SKIP.search(prev)
        std = CXX_STD.search(prev)
        if lang in LANGS:
            out.append(Block(path, start + 1, lang, "\n".join(body) + "\n", sk.group(1) if sk else None,
                             f"c++{std.group(1)}" if std else "c++17"))
    return out


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = RUN_TIMEOUT) -> tuple[bool, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s: {' '.join(cmd)}"
    return p.returncode == 0, (p.stdout + p.stderr)[-4000:]


def workspace_dependency(name: str) -> str:
    """`name = <spec>`, the dependency as the root Cargo.toml's
    [workspace.dependencies] declares it (its one line there)."""
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.dependencies]", 1)[1]
    m = re.search(rf"^{re.escape(name)}\s*=.*$", section, re.M)
    if not m:
        raise SystemExit(f"Cargo.toml: no {name} in [workspace.dependencies]")
    return m.group(0) + "\n"


def check_rust(bs: list[Block]) -> list[Failure]:
    if not bs:
        return []
    proj = SCRATCH / "rust"
    shutil.rmtree(proj / "src", ignore_errors=True)
    (proj / "src" / "bin").mkdir(parents=True)
    # Its own workspace (it lives inside this one's target/), the crate by
    # path, the async runtime its own tests await tasks on (tokio, as the
    # workspace declares it), and the repository's lock file so the versions
    # are the tested ones.
    (proj / "Cargo.toml").write_text(
        '[package]\nname = "wspool-snippets"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n\n'
        f'[dependencies]\nwspool = {{ path = "{ROOT / "core"}" }}\n{workspace_dependency("tokio")}\n[workspace]\n'
    )
    shutil.copy(ROOT / "Cargo.lock", proj / "Cargo.lock")
    for b in bs:
        code = b.code
        if not re.search(r"^\s*fn main\s*\(", code, re.M):
            code = "fn main() -> Result<(), Box<dyn std::error::Error>> {\n" + code + "    Ok(())\n}\n"
        (proj / "src" / "bin" / f"{b.name}.rs").write_text(f"// {b.where}\n{code}")
    env = dict(os.environ, RUSTFLAGS="-D warnings", CARGO_TARGET_DIR=str(SCRATCH / "rust-target"))
    ok, out = run(["cargo", "build", "--release", "--bins", "-q"], proj, env, timeout=900)
    if not ok:
        # Name the blocks whose files the compiler complained about.
        bad = [b for b in bs if f"{b.name}.rs" in out]
        if not bad:
            return [Failure("(the rust scratch project)", "rust", "does not build\n" + out)]
        return [Failure(b.where, "rust", "does not build") for b in bad[:-1]] + [
            Failure(bad[-1].where, "rust", "does not build\n" + out)]
    failures = []
    for b in bs:
        ok, out = run([str(SCRATCH / "rust-target" / "release" / b.name)], proj)
        if not ok:
            failures.append(Failure(b.where, "rust", "failed when run\n" + out))
    return failures


def check_c(bs: list[Block]) -> list[Failure]:
    lib = ROOT / "target" / "release"
    if bs and not (lib / "libwspool.so").exists():
        return [Failure("target/release/libwspool.so", "c", "is missing: run `make c-build` first")]
    d = SCRATCH / "c"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    failures = []
    for b in bs:
        src, exe = d / f"{b.name}.c", d / b.name
        src.write_text(f"/* {b.where} */\n{b.code}")
        ok, out = run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", str(src),
                       "-o", str(exe), f"-L{lib}", f"-Wl,-rpath,{lib}", "-lwspool", "-pthread"], d)
        if not ok:
            failures.append(Failure(b.where, "c", "does not compile\n" + out))
            continue
        ok, out = run([str(exe)], d)
        if not ok:
            failures.append(Failure(b.where, "c", "failed when run\n" + out))
    return failures


def check_cpp(bs: list[Block]) -> list[Failure]:
    lib = ROOT / "target" / "release"
    if bs and not (lib / "libwspool.so").exists():
        return [Failure("target/release/libwspool.so", "cpp", "is missing: run `make c-build` first")]
    d = SCRATCH / "cpp"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    failures = []
    for b in bs:
        src, exe = d / f"{b.name}.cpp", d / b.name
        src.write_text(f"// {b.where}\n{b.code}")
        ok, out = run(["g++", f"-std={b.cxx_std}", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", str(src),
                       "-o", str(exe), f"-L{lib}", f"-Wl,-rpath,{lib}", "-lwspool", "-pthread"], d)
        if not ok:
            failures.append(Failure(b.where, "cpp", "does not compile\n" + out))
            continue
        ok, out = run([str(exe)], d)
        if not ok:
            failures.append(Failure(b.where, "cpp", "failed when run\n" + out))
    return failures


def check_python(bs: list[Block], python: str) -> list[Failure]:
    d = SCRATCH / "python"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    failures = []
    for b in bs:
        src = d / f"{b.name}.py"
        src.write_text(f"# {b.where}\n{b.code}")
        ok, out = run([python, str(src)], d)
        if not ok:
            failures.append(Failure(b.where, "python", "failed\n" + out))
    return failures


def check(files: list[Path], python: str) -> tuple[int, list[Failure]]:
    all_blocks = [b for f in files for b in blocks(f)]
    todo = [b for b in all_blocks if b.skip is None]
    for b in all_blocks:
        if b.skip is not None:
            print(f"  not run (marked): {b.where} [{b.lang}] {b.skip}")
    by = {lang: [b for b in todo if b.lang == lang] for lang in LANGS}
    print("snippets: %d rust, %d c, %d cpp, %d python to run; %d marked not-run" % (
        len(by["rust"]), len(by["c"]), len(by["cpp"]), len(by["python"]), len(all_blocks) - len(todo)))
    failures = check_rust(by["rust"]) + check_c(by["c"]) + check_cpp(by["cpp"]) + check_python(by["python"], python)
    return len(todo), failures


def self_test(python: str) -> int:
    with tempfile.TemporaryDirectory() as t:
        md = Path(t) / "broken.md"
        md.write_text(
            "```rust\nlet x: u32 = wspool::no_such_function();\n```\n\n"
            "```c\n#include \"libwspool.h\"\nint main(void) { return wspool_no_such_function(); }\n```\n\n"
            "```python\nimport wspool\nwspool.no_such_function()\n```\n\n"
            "<!-- snippet: not-run (self-test: a marked block is skipped) -->\n```python\nraise SystemExit(1)\n```\n\n"
            "```cpp\n#include <wspool.hpp>\nint main() { return wspool::no_such_function(); }\n```\n\n"
            # Valid C++20 only (a requires-clause): reported unless the marker is honoured.
            "<!-- snippet: c++20 -->\n```cpp\ntemplate <class T> requires (sizeof(T) > 0)\n"
            "int zero(T) { return 0; }\nint main() { return zero(1); }\n```\n"
        )
        _, failures = check([md], python)
    reported = {f.lang for f in failures if f.where.startswith(str(md))}
    marked_ran = any(f.where == f"{md}:13" for f in failures)
    if reported == {"rust", "c", "cpp", "python"} and len(failures) == 4 and not marked_ran:
        print("self-test: the checker reports a broken block in each language, skips a marked one and "
              "compiles a c++20-marked one as C++20")
        return 0
    print("self-test FAILED: reported %s\n%s" % (sorted(reported), "\n".join(map(str, failures))))
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="interpreter with wspool installed")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args()
    if os.sep in args.python:  # the blocks run from the scratch directory
        args.python = str(Path(args.python).absolute())
    if args.self_test:
        return self_test(args.python)
    files = args.files or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "examples-c" / "README.md"]
    files = [f for f in files if f.exists()]
    n, failures = check(files, args.python)
    for f in failures:
        print(f"FAIL {f}")
    if failures:
        print(f"snippets: {len(failures)} problem(s) in {n} blocks")
        return 1
    print(f"snippets: all {n} blocks built and ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
