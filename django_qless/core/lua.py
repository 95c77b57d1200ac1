"""Assemble the engine's Lua sources into the one script every client loads.

`python -m django_qless.core.lua` prints the assembled script, so any qless client
(Ruby, Python, Go) can load our engine in place of qless-core's.
"""

from __future__ import annotations

import hashlib
import sys
from functools import cache
from importlib import resources

__all__ = ["MANIFEST", "script_text", "script_sha"]

# Concatenation order: helpers first, the dispatch table and entry point last.
MANIFEST: tuple[str, ...] = (
    "base.lua",
    "throttle.lua",
    "job.lua",
    "recurring.lua",
    "queue.lua",
    "worker.lua",
    "config.lua",
    "api.lua",
)


@cache
def script_text() -> str:
    """Return the assembled script (cached per process)."""
    package = resources.files("django_qless") / "lua"
    parts = []
    for name in MANIFEST:
        source = (package / name).read_text(encoding="utf-8")
        parts.append(f"-- ==== {name} ====\n{source.rstrip()}\n")
    return "\n".join(parts)


@cache
def script_sha() -> str:
    """Return the SHA1 that Redis will use for the assembled script."""
    return hashlib.sha1(script_text().encode("utf-8")).hexdigest()  # noqa: S324 - Redis's id


def main() -> None:
    """Print the assembled script to stdout."""
    sys.stdout.write(script_text())


if __name__ == "__main__":
    main()
