#!/usr/bin/env python3
"""The docs cannot drift from the code: checks run by ctest (tests/CMakeLists.txt).

  docs_test.py SOURCE_DIR refs       every repository path that a Markdown file or
                                     a source file names exists (git ls-files and
                                     their folders)
  docs_test.py SOURCE_DIR layout     README.md's layout table matches the tree
  docs_test.py SOURCE_DIR markers    every guide README.md lists marks its main
                                     example (or GUIDES_WITHOUT_EXAMPLE says why
                                     not), every `<!-- example: NAME -->` block has
                                     a runner here, and every runner its blocks
  docs_test.py SOURCE_DIR example NAME --build BUILD_DIR [--python PY]
               [--work DIR] [--s3-env SERVER_ENV]
                                     extracts the guide's example NAME from its
                                     Markdown and runs it as written
  docs_test.py SOURCE_DIR demo-store --build BUILD_DIR --work DIR
                                     makes DIR/demo.ckptdb as tools/demo.sh does

A guide marks the code block that runs with an HTML comment on the line
before its fence:

    <!-- example: NAME -->
    ```sh

Examples run in a fresh directory that looks like the repository root (a
link to each top-level entry of SOURCE_DIR) with `build` linking to
BUILD_DIR, so that `build/ckptdb`, `python/examples/train.py` and
`$PWD/build/python` mean what a newcomer's checkout means; PATH starts with
BUILD_DIR (the `ckptdb` command) and the Python's bin directory (`torchrun`).
Anything the example writes stays in that directory, removed afterwards.

Exit status: 0 passed, 1 failed, 77 skipped (the reason is printed).
Standard library only: runs under /usr/bin/python3 and the venv alike.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77

# --------------------------------------------------------------------------
# The repository

_TRACKED: list[str] | None = None


def tracked(src: Path) -> list[str]:
    global _TRACKED
    if _TRACKED is None:
        out = subprocess.run(["git", "-C", str(src), "ls-files", "-z"], check=True, capture_output=True).stdout
        # A file deleted in the working tree but not yet in the index is gone.
        _TRACKED = sorted(f for f in out.decode().split("\0") if f and (src / f).exists())
    return _TRACKED


def tracked_dirs(src: Path) -> set[str]:
    dirs = set()
    for f in tracked(src):
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def exists_in_repo(src: Path, rel: str) -> bool:
    rel = os.path.normpath(rel)
    if rel in (".", ""):
        return True
    if rel.startswith(".."):
        return False
    return rel in _tracked_set(src) or rel in tracked_dirs(src)


_TRACKED_SET: set[str] | None = None


def _tracked_set(src: Path) -> set[str]:
    global _TRACKED_SET
    if _TRACKED_SET is None:
        _TRACKED_SET = set(tracked(src))
    return _TRACKED_SET


def ignored(src: Path, paths: list[str]) -> set[str]:
    """The paths .gitignore names (build outputs, demo stores)."""
    if not paths:
        return set()
    r = subprocess.run(["git", "-C", str(src), "check-ignore", "--no-index", "--stdin"],
                       input="\n".join(paths) + "\n", capture_output=True, text=True)
    return set(r.stdout.split("\n")) - {""}


# --------------------------------------------------------------------------
# refs: every repository path named in docs and sources exists

TOP_FOLDERS = ("src", "include", "tools", "tests", "proto", "python", "third_party", ".ci")

# A path that starts with a known top-level folder, or any name ending in .md.
# Not preceded by a path character: `$work/prefix/include/ckptdb/` and
# `${CMAKE_SOURCE_DIR}/src` are not repository-relative names.
CANDIDATE = re.compile(
    r"(?<![\w./$~{}@:-])"
    r"((?:" + "|".join(re.escape(t) for t in TOP_FOLDERS) + r")/[\w./+-]*(?:\{[\w.,]+\})?"
    r"|[\w./-]*\w\.md)"
    r"(?![\w/*{<$-])")
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")

# Files not scanned, and why.
REFS_SKIP_FILES = {
    ".gitignore": "patterns of build outputs, not references",
    "tests/docs_test.py": "this checker: its patterns and examples are not references",
}

# Names that look like repository paths but are not, and why.
REFS_ALLOWED = {
    "tests/aws-signing-test-suite/v4": "a folder of awslabs/aws-c-auth, where AWS's SigV4 test suite is kept",
    "tests/ckptdb_tests": "a program of the build directory (tools/gpu-check.sh runs it from there)",
}


def _candidates(text: str):
    for m in CANDIDATE.finditer(text):
        tok = m.group(1).rstrip(".")
        if tok.endswith("/.") or "..." in tok:
            continue
        line = text.count("\n", 0, m.start()) + 1
        brace = re.match(r"(.*)\{([\w.,]+)\}$", tok)  # src/format/chunk_codec.{h,cc}
        for t in ([brace.group(1) + alt for alt in brace.group(2).split(",")] if brace else [tok]):
            yield line, t


def check_refs(src: Path) -> list[str]:
    problems = []
    pending = []  # (file, line, token, [resolutions])
    for f in tracked(src):
        if f in REFS_SKIP_FILES:
            continue
        try:
            text = (src / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        here = os.path.dirname(f)
        bad_links = set()
        if f == "README.md":
            # The layout table names files relative to its rows' folders:
            # check_layout checks it.
            m = re.search(r"^## Layout of the repository\n.*?(?=^## |\Z)", text, re.S | re.M)
            if m:
                text = text[:m.start()] + re.sub(r"[^\n]", " ", m.group(0)) + text[m.end():]
        if f.endswith(".md"):
            for m in MD_LINK.finditer(text):
                target = m.group(1)
                if re.match(r"[a-z]+:", target):
                    continue  # https://, mailto:
                line = text.count("\n", 0, m.start()) + 1
                rel = os.path.normpath(os.path.join(here, target))
                if not exists_in_repo(src, rel):
                    problems.append(f"{f}:{line}: link to {target} ({rel}): not in the repository")
                    bad_links.add((line, target))
        for line, tok in _candidates(text):
            if tok in REFS_ALLOWED or (line, tok) in bad_links:
                continue
            # From the root, or from the naming file's folder (a bare name:
            # either).
            tries = [tok] if tok.startswith(TOP_FOLDERS) or "/" not in tok else []
            tries.append(os.path.join(here, tok))
            if any(exists_in_repo(src, t) for t in tries):
                continue
            pending.append((f, line, tok, tries))
    ign = ignored(src, [os.path.normpath(t) for _, _, _, tries in pending for t in tries])
    for f, line, tok, tries in pending:
        if any(os.path.normpath(t) in ign for t in tries):
            continue  # a build output or a store, named as such
        untracked = any(os.path.exists(src / t) for t in tries)
        problems.append(f"{f}:{line}: {tok}: no such file or folder in the repository"
                        + (" (it is in the working tree: git add it?)" if untracked else ""))
    return problems


# --------------------------------------------------------------------------
# layout: README.md's table of folders matches the tree

# Folders whose own subfolders the layout table must all name.
LAYOUT_COMPLETE = ("src", "tools", "python", "tests", "include")


def layout_rows(src: Path) -> list[tuple[int, str, str]]:
    text = (src / "README.md").read_text()
    m = re.search(r"^## Layout of the repository\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        raise SystemExit("README.md has no '## Layout of the repository' section")
    start = text.count("\n", 0, m.start(1)) + 1
    rows = []
    for i, line in enumerate(m.group(1).split("\n")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        rows.append((start + i, cells[0].strip("`"), "|".join(cells[1:])))
    return rows


def check_layout(src: Path) -> list[str]:
    problems = []
    rows = layout_rows(src)
    files, dirs = _tracked_set(src), tracked_dirs(src)
    named_dirs = set()
    for line, folder, what in rows:
        folder = folder.rstrip("/")
        if folder not in dirs:
            problems.append(f"README.md:{line}: layout row `{folder}/`: no such folder")
            continue
        named_dirs.add(folder)
        under = [f for f in files if f.startswith(folder + "/")]
        for tok in re.findall(r"`([^`]+)`", what):
            if "/" in tok and not tok.endswith("/") and "." not in tok.split("/")[-1]:
                continue  # `OpenStoreWriter`/`OpenStoreReader`: not a path
            if tok.endswith("/"):
                rel = tok.rstrip("/")
                if f"{folder}/{rel}" in dirs:
                    named_dirs.add(f"{folder}/{rel}")
                elif rel in dirs:
                    named_dirs.add(rel)
                else:
                    problems.append(f"README.md:{line}: layout row `{folder}/` names `{tok}`: no such folder")
            elif re.search(r"\.[A-Za-z]{1,5}$", tok) and " " not in tok:
                if "/" in tok:
                    ok = tok in files or f"{folder}/{tok}" in files
                else:
                    ok = any(f.rsplit("/", 1)[-1] == tok for f in under)
                if not ok:
                    problems.append(f"README.md:{line}: layout row `{folder}/` names `{tok}`: no such file under it")
        if folder == "tools":
            named = set(re.findall(r"`([^`/]+\.sh)`", what))
            for f in under:
                name = f[len("tools/"):]
                if "/" not in name and name.endswith(".sh") and name not in named:
                    problems.append(f"README.md:{line}: layout row `tools/` does not name the script `{name}`")
    for d in sorted(dirs):
        top = d.split("/")[0]
        if "/" not in d:
            if not any(n == d or n.startswith(d + "/") for n in named_dirs):
                problems.append(f"README.md: the layout table has no row for the folder `{d}/`")
        elif d.count("/") == 1 and top in LAYOUT_COMPLETE and d not in named_dirs:
            if not (top == "include" and any(n.startswith(d) for n in named_dirs)):
                problems.append(f"README.md: the layout table does not name the folder `{d}/`")
    return problems


# --------------------------------------------------------------------------
# Examples in the Markdown

MARKER = re.compile(r"^<!-- example: ([\w-]+) -->\s*$")


def find_examples(src: Path) -> tuple[dict[str, dict], list[str]]:
    """Every marked block: NAME -> {file, line, lang, code}."""
    found, problems = {}, []
    for f in tracked(src):
        if not f.endswith(".md"):
            continue
        lines = (src / f).read_text().split("\n")
        for i, line in enumerate(lines):
            m = MARKER.match(line)
            if not m:
                continue
            name = m.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            fence = re.match(r"^(`{3,})(\w*)\s*$", lines[j]) if j < len(lines) else None
            if not fence:
                problems.append(f"{f}:{i + 1}: example marker '{name}' is not followed by a code fence")
                continue
            k = j + 1
            while k < len(lines) and not lines[k].startswith(fence.group(1)):
                k += 1
            if k == len(lines):
                problems.append(f"{f}:{j + 1}: example '{name}': the code fence never closes")
                continue
            if name in found:
                problems.append(f"{f}:{i + 1}: example '{name}' is marked twice (also {found[name]['file']})")
            found[name] = {"file": f, "line": j + 2, "lang": fence.group(2),
                           "code": "\n".join(lines[j + 1:k]) + "\n"}
    return found, problems


def check_markers(src: Path) -> list[str]:
    found, problems = find_examples(src)
    used = {b for blocks in RUNNERS.values() for b in blocks[1]}
    for name in sorted(set(found) - used):
        problems.append(f"{found[name]['file']}:{found[name]['line']}: example '{name}' has no runner in "
                        f"tests/docs_test.py (RUNNERS)")
    text = (src / "README.md").read_text()
    m = re.search(r"^## The guides\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    guides = re.findall(r"^\| \[`?([^`\]]+)`?\]\(", m.group(1), re.M) if m else []
    if not guides:
        problems.append("README.md: no '## The guides' table of [`GUIDE`](GUIDE) rows")
    with_examples = {"README.md"} | {b["file"] for b in found.values()}
    for g in guides:
        if g not in with_examples and g not in GUIDES_WITHOUT_EXAMPLE:
            problems.append(f"{g}: a guide without a marked example (<!-- example: NAME -->); mark its main "
                            f"example, or say in GUIDES_WITHOUT_EXAMPLE why it has none")
    for runner, (_, blocks) in sorted(RUNNERS.items()):
        for b in blocks:
            if b not in found:
                problems.append(f"runner '{runner}' needs the example block '{b}', which no Markdown file marks")
    return problems


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


class Ctx:
    def __init__(self, src: Path, build: Path, python: str | None, work: Path | None, s3_env: str | None):
        self.src, self.build, self.python, self.s3_env = src, build, python, s3_env
        self.work = work
        self.blocks, problems = find_examples(src)
        if problems:
            raise Failed("\n".join(problems))
        self.tmp = Path(tempfile.mkdtemp(prefix="ckptdb-docs-"))
        self.root = self.tmp / "root"
        self.root.mkdir()
        for entry in sorted({f.split("/")[0] for f in tracked(src)}):
            (self.root / entry).symlink_to(src / entry)
        (self.root / "build").symlink_to(build)
        self.env = dict(os.environ)
        path = [str(build)]
        if python:
            path.insert(0, os.path.dirname(python))
            venv = Path(python).parent.parent
            if (venv / "pyvenv.cfg").exists():
                self.env["CKPTDB_BENCH_VENV"] = str(venv)  # what tools/python-env.sh prints
            self.env["PYTHONPATH"] = str(build / "python")
        self.env["PATH"] = ":".join(path + [self.env.get("PATH", "/usr/bin:/bin")])
        (self.tmp / "tmp").mkdir()
        self.env["TMPDIR"] = str(self.tmp / "tmp")  # mktemp -d in an example: removed with the rest
        # A newcomer's shell: no job of the test runner's to join.
        for k in list(self.env):
            if (k.startswith(("CKPTDB_", "TORCHELASTIC_")) and k != "CKPTDB_BENCH_VENV") or k in (
                    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
                del self.env[k]

    def block(self, name: str) -> dict:
        return self.blocks[name]

    def where(self, name: str) -> str:
        b = self.blocks[name]
        return f"{b['file']}:{b['line']}"

    def run(self, argv, *, label: str, input: str | None = None, ok_codes=(0,), timeout=600, env=None,
            cwd=None) -> subprocess.CompletedProcess:
        t = time.monotonic()
        r = subprocess.run(argv, cwd=cwd or self.root, env=env or self.env, input=input, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        print(f"--- {label}: exit {r.returncode} in {time.monotonic() - t:.1f} s")
        print(r.stdout, end="" if r.stdout.endswith("\n") or not r.stdout else "\n")
        if r.returncode not in ok_codes:
            raise Failed(f"{label}: exit status {r.returncode}")
        return r

    def bash(self, name: str, code: str | None = None, **kw) -> subprocess.CompletedProcess:
        code = self.blocks[name]["code"] if code is None else code
        return self.run(["bash", "-euo", "pipefail", "-c", code], label=f"{self.where(name)} (bash)", **kw)

    def demo_store(self, dst: Path):
        """A copy of the demo's store (tools/demo.sh's first job) at dst."""
        work = self.work or self.tmp
        make_demo_store(self.build, work)
        shutil.copytree(work / "demo.ckptdb", dst, symlinks=True)

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def make_demo_store(build: Path, work: Path):
    """work/demo.ckptdb as tools/demo.sh makes it (4 ranks, 3 steps), once."""
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (work / "demo.ckptdb.done").exists():
            return
        shutil.rmtree(work / "demo.ckptdb", ignore_errors=True)
        t = time.monotonic()
        # What tools/demo.sh runs after building (it also installs and builds,
        # which a test must not do to the tree under test).
        r = subprocess.run([str(build / "ckptdb-launch"), "-n", "4", "--", str(build / "ckptdb-demo"),
                            str(work / "demo.ckptdb")], capture_output=True, text=True, timeout=600)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0:
            raise Failed(f"the demo's training job (ckptdb-launch -n 4 -- ckptdb-demo) failed: {r.returncode}")
        print(f"--- the demo's store made in {time.monotonic() - t:.1f} s")
        (work / "demo.ckptdb.done").touch()


def need_python(ctx: Ctx):
    if not ctx.python:
        raise Skipped("no Python with PyTorch given (--python; the build has CKPTDB_PYTHON=OFF)")
    if not (Path(ctx.python).parent / "torchrun").exists():
        raise Skipped(f"{ctx.python}'s environment has no torchrun")


# --------------------------------------------------------------------------
# The runners: one per guide's example

def run_readme_python(ctx: Ctx):
    """README.md, "Python in 20 lines": train.py under torchrun on 2 ranks,
    twice (the second run resumes from the first's latest step)."""
    need_python(ctx)
    b = ctx.block("readme-python")
    first = b["code"].split("\n", 1)[0]
    m = re.match(r"# (\S+), run with: (.*)$", first)
    if not m:
        raise Failed(f"{ctx.where('readme-python')}: the first line should say '# FILE, run with: COMMAND'")
    (ctx.root / m.group(1)).write_text(b["code"])
    cmd = shlex.split(m.group(2))
    r = ctx.run(cmd, label=f"{m.group(2)} (first run)", timeout=300)
    # (Not anchored to lines: the two ranks share torchrun's stdout, and one
    # rank's line can run into the other's before its newline.)
    latest = re.findall(r"rank (\d): latest step (\d+)", r.stdout)
    if sorted(latest) != [("0", "15"), ("1", "15")]:
        raise Failed(f"expected 'rank R: latest step 15' from both ranks, got {latest}")
    r = ctx.run(cmd, label=f"{m.group(2)} (again: resumes)", timeout=300)
    latest = re.findall(r"rank (\d): latest step (\d+)", r.stdout)
    if sorted(latest) != [("0", "35"), ("1", "35")]:
        raise Failed(f"expected the second run to resume (steps 16-35, latest 35), got {latest}")


def run_readme_cli(ctx: Ctx):
    """README.md, "The ckptdb command in 10 lines", on the demo's store."""
    ctx.demo_store(ctx.root / "demo.ckptdb")
    ctx.bash("readme-cli")


def _transcript(ctx: Ctx, name: str):
    """A `$ COMMAND` / output transcript, on the demo's store: each command
    runs, and its output has the shape shown: as many lines, the first one
    alike and every other one starting alike (numbers, times and column
    widths aside: sizes, times and RocksDB's files vary from run to run)."""
    ctx.demo_store(ctx.root / "demo.ckptdb")
    steps, cur = [], None
    for line in ctx.block(name)["code"].rstrip("\n").split("\n"):
        if line.startswith("$ "):
            cur = [line[2:], []]
            steps.append(cur)
        elif cur is None:
            raise Failed(f"{ctx.where(name)}: a transcript starts with '$ COMMAND'")
        else:
            cur[1].append(line)

    def shape(line: str) -> str:
        line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "T", line)
        line = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", line)
        return " ".join(line.split())

    for cmd, expected in steps:
        r = ctx.run(["bash", "-o", "pipefail", "-c", cmd], label=f"$ {cmd}")
        got = r.stdout.rstrip("\n").split("\n") if r.stdout.strip() else []
        why = None
        if len(got) != len(expected):
            why = f"{len(got)} lines where the guide shows {len(expected)}"
        elif expected and shape(got[0]) != shape(expected[0]):
            why = f"its first line is\n  {got[0]}\nwhere the guide shows\n  {expected[0]}"
        else:
            for g, e in zip(got, expected):
                if shape(g).split(" ")[0] != shape(e).split(" ")[0]:
                    why = f"a line is\n  {g}\nwhere the guide shows\n  {e}"
                    break
        if why:
            raise Failed(f"{ctx.where(name)}: `{cmd}`: {why}")


def run_tools_cli(ctx: Ctx):
    _transcript(ctx, "tools-cli")


def run_src_dedup(ctx: Ctx):
    _transcript(ctx, "src-dedup")


def run_python_crash_resume(ctx: Ctx):
    """python/README.md, "train, crash, resume on another world size":
    three torchrun jobs and the loss comparison (the second job fails on
    purpose, so this block runs without `set -e`)."""
    need_python(ctx)
    r = ctx.run(["bash", "-uo", "pipefail", "-c", ctx.block("python-crash-resume")["code"]],
                label=f"{ctx.where('python-crash-resume')} (bash)", timeout=600)
    if not re.search(r"^resumed from step 10 of \S+ on 3 ranks", r.stdout, re.M):
        raise Failed("the third job did not say 'resumed from step 10 of ... on 3 ranks'")
    m = re.search(r"^max \|loss difference\|: (\S+)$", r.stdout, re.M)
    if not m or not float(m.group(1)) < 1e-3:
        raise Failed(f"the resumed curve is not the uninterrupted one: {m.group(0) if m else 'no comparison'}")


def run_include_cpp(ctx: Ctx):
    """include/README.md: install the build into a prefix, as the guide says
    (its /opt/ckptdb is a folder of this test's), then build the example
    with the guide's CMake lines and run it."""
    prefix = ctx.tmp / "opt" / "ckptdb"
    ctx.bash("include-install", ctx.block("include-install")["code"].replace("/opt/ckptdb", str(prefix)))
    proj = ctx.tmp / "your_project"
    proj.mkdir()
    (proj / "your.cc").write_text(ctx.block("include-cpp")["code"])
    (proj / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(your_project CXX)\nset(CMAKE_CXX_STANDARD 17)\n"
        "add_executable(your_program your.cc)\n" + ctx.block("include-cmake")["code"])
    ctx.run(["cmake", "-S", str(proj), "-B", str(proj / "build"), f"-DCMAKE_PREFIX_PATH={prefix}",
             "-DCMAKE_BUILD_TYPE=Release"], label=f"cmake with {ctx.where('include-cmake')}")
    ctx.run(["cmake", "--build", str(proj / "build"), "-j", "2"], label=f"build {ctx.where('include-cpp')}")
    r = ctx.run([str(proj / "build" / "your_program")], label="your_program", cwd=proj)
    if r.stdout.strip() != '{"lr": 0.0003}':
        raise Failed(f"your_program printed {r.stdout!r}, not the bytes it saved")
    ctx.run([str(ctx.build / "ckptdb"), "verify", str(proj / "run.ckptdb"), "--all"], label="ckptdb verify")


def run_bucket(ctx: Ctx):
    """src/bucket/README.md, against the test suite's SeaweedFS server (the
    S3Server fixture): the guide's `export AWS_...` lines are the settings
    of a server of the reader's own, so this server's take their place, and
    its bucket takes the place of my-bucket (under a prefix of this run's)."""
    if not ctx.s3_env or not os.path.exists(ctx.s3_env):
        raise Skipped("no S3 test server (--s3-env SERVER_ENV: the S3Server ctest fixture's server.env)")
    env = {}
    for line in open(ctx.s3_env):
        k, _, v = line.strip().partition("=")
        env[k] = v
    if "CKPTDB_S3_UNAVAILABLE" in env:
        raise Skipped(env["CKPTDB_S3_UNAVAILABLE"])
    code = ctx.block("bucket")["code"]
    settings = [l for l in code.split("\n") if l.startswith("export AWS_")]
    if not settings:
        raise Failed(f"{ctx.where('bucket')}: no 'export AWS_...' settings")
    code = "\n".join(l for l in code.split("\n") if not l.startswith("export AWS_"))
    code = code.replace("s3://my-bucket/", f"s3://{env['CKPTDB_S3_BUCKET']}/docs-{os.getpid()}-{int(time.time())}/")
    run_env = dict(ctx.env, AWS_ENDPOINT_URL=env["CKPTDB_S3_ENDPOINT"], AWS_ACCESS_KEY_ID=env["CKPTDB_S3_ACCESS_KEY"],
                   AWS_SECRET_ACCESS_KEY=env["CKPTDB_S3_SECRET_KEY"], AWS_REGION="us-east-1")
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        run_env.pop(k, None)
    if "demo.ckptdb" in code:
        ctx.demo_store(ctx.root / "demo.ckptdb")
    ctx.bash("bucket", code, env=run_env)


# name -> (runner, the example blocks it runs)
RUNNERS = {
    "readme-python": (run_readme_python, ["readme-python"]),
    "readme-cli": (run_readme_cli, ["readme-cli"]),
    "python-crash-resume": (run_python_crash_resume, ["python-crash-resume"]),
    "tools-cli": (run_tools_cli, ["tools-cli"]),
    "src-dedup": (run_src_dedup, ["src-dedup"]),
    "include-cpp": (run_include_cpp, ["include-install", "include-cpp", "include-cmake"]),
    "bucket": (run_bucket, ["bucket"]),
}
# Guides (README.md's table of guides) without a runnable example, and why.
GUIDES_WITHOUT_EXAMPLE = {
    "tools/bench/README.md": "its commands are the benchmarks behind its figures (minutes each on 2 cores)",
    "proto/FORMAT.md": "byte layouts, not code",
}


# --------------------------------------------------------------------------

def report(what: str, problems: list[str]) -> int:
    for p in problems:
        print(p)
    if problems:
        print(f"docs_test {what}: {len(problems)} problem(s)")
        return 1
    print(f"docs_test {what}: ok")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source_dir", type=Path)
    ap.add_argument("check", choices=["refs", "layout", "markers", "example", "demo-store"])
    ap.add_argument("name", nargs="?")
    ap.add_argument("--build", type=Path)
    ap.add_argument("--python")
    ap.add_argument("--work", type=Path, help="a folder shared by the examples (the demo's store, made once)")
    ap.add_argument("--s3-env")
    a = ap.parse_intermixed_args()
    src = a.source_dir.resolve()
    if a.check == "refs":
        return report("refs", check_refs(src))
    if a.check == "layout":
        return report("layout", check_layout(src))
    if a.check == "markers":
        return report("markers", check_markers(src))
    if not a.build:
        ap.error("--build BUILD_DIR is needed")
    build = a.build.resolve()
    if a.check == "demo-store":
        if not a.work:
            ap.error("--work DIR is needed")
        work = a.work.resolve()
        (work / "demo.ckptdb.done").unlink(missing_ok=True)  # a fresh one
        make_demo_store(build, work)
        return 0
    if a.name not in RUNNERS:
        ap.error(f"example NAME is one of {', '.join(RUNNERS)}")
    ctx = Ctx(src, build, a.python, a.work.resolve() if a.work else None, a.s3_env)
    t = time.monotonic()
    try:
        RUNNERS[a.name][0](ctx)
    except Skipped as e:
        print(f"docs_test example {a.name}: skipped: {e}")
        return SKIP
    except (Failed, subprocess.TimeoutExpired) as e:
        print(f"docs_test example {a.name}: FAILED: {e}")
        return 1
    finally:
        ctx.close()
    print(f"docs_test example {a.name}: ok ({time.monotonic() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
