"""Product prose describes the product: no development diary in tracked files.

README, CHANGELOG, docs, code, comments and file names say what the software is and does;
they never tell how it was built (numbered work sessions, the machine it was built on, tallies
of targets, the branch and commit a figure came from). Measurements state their figure,
method, machine class and date instead. The patterns and samples below are spelled so that a
plain `git grep` for those words finds nothing here either.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

__all__: list[str] = []

ROOT = Path(__file__).resolve().parent.parent

# Words that only a development diary uses, in any tracked text file.
DIARY = re.compile(
    r"\bsessions? \d|\bsession[-_]?\d|\bthis [V]M\b|\btargets? (?:met|missed)\b|\bmai[n] at\b",
    re.IGNORECASE,
)
# A commit-hash-looking token: 7-40 hex digits with at least one letter and one digit. Only
# checked in markdown prose (tests and code hold 32-hex jids and shas on purpose).
COMMIT_HASH = re.compile(r"(?<![\w/#-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])")

# Never scanned: recorded benchmark output is data, not prose.
EXCLUDED = ("benchmarks/results/",)
# This file names the patterns it forbids.
SELF = "tests/test_product_prose.py"


def _tracked() -> list[str]:
    """List the tracked files, or skip outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p]


def _scanned() -> list[str]:
    """Return the tracked paths this test holds to the prose rule."""
    return [
        p
        for p in _tracked()
        if p != SELF and not p.startswith(EXCLUDED)
    ]


def _text(path: str) -> str | None:
    """Read a tracked file as text; None for binary files and files gone from the tree."""
    try:
        data = (ROOT / path).read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def _is_prose(path: str) -> bool:
    """Tell whether a path is markdown prose (README, CHANGELOG, CONTRIBUTING, docs)."""
    return path.endswith(".md")


def test_no_diary_words_in_tracked_files() -> None:
    """No tracked file or file name uses the diary's words."""
    found = []
    for path in _scanned():
        if DIARY.search(path):
            found.append(f"{path}: file name")
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            match = DIARY.search(line)
            if match:
                found.append(f"{path}:{number}: {match.group(0)!r}")
    assert not found, "development diary in product prose:\n" + "\n".join(found)


def test_no_commit_hashes_in_markdown() -> None:
    """No README, CHANGELOG or guide cites a commit hash."""
    found = []
    for path in filter(_is_prose, _scanned()):
        text = _text(path) or ""
        for number, line in enumerate(text.splitlines(), 1):
            match = COMMIT_HASH.search(line)
            if match:
                found.append(f"{path}:{number}: {match.group(0)!r}")
    assert not found, "commit hashes in product prose:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for() -> None:
    """Each pattern matches the diary it is for and passes ordinary prose and data."""
    session, vm, met, main = "sess" "ion", "this " "VM", "targets " "met", "ma" "in at"
    for diary in (f"in {session} 7's run", f"{session.title()} 16", f"{session}-7", f"on {vm}",
                  f"{met.title()}: 12", "target " "missed", f"(measured on {main} faa5637)"):
        assert DIARY.search(diary), diary
    for prose in ("a staff session with view permission", "each test session starts",
                  "the domain" " at rest", "a 2-core x86 VM, Redis 7.0"):
        assert not DIARY.search(prose), prose
    for commit in ("at faa5637.", "commit 1d7dd9f", "e06c808 Bench"):
        assert COMMIT_HASH.search(commit), commit
    for data in ("2147483648", "`1700000000.25`", "deadbeef", "ql:{s7}:q", "color #1f2937aa",
                 "sha256 abc-1234567"):
        assert not COMMIT_HASH.search(data), data
