"""Assemble the engine's Lua sources into the one script every client loads.

`python -m django_qless.core.lua` prints the assembled script, so any qless client
(Ruby, Python, Go) can load our engine in place of qless-core's. On Redis 7+ our own
client loads the same code as a function library instead (`library_text`): a function's
top level runs once per server, where EVALSHA re-runs the whole script body on every call.
"""

from __future__ import annotations

import hashlib
import sys
from functools import cache
from importlib import resources

__all__ = ["MANIFEST", "function_name", "library_text", "script_sha", "script_text"]

# Concatenation order: helpers first, the dispatch table and entry point last.
MANIFEST: tuple[str, ...] = (
    "base.lua",
    "validate.lua",
    "history.lua",
    "objects.lua",
    "throttle.lua",
    "job.lua",
    "complete.lua",
    "jobmeta.lua",
    "put.lua",
    "recurring.lua",
    "queue.lua",
    "queries.lua",
    "worker.lua",
    "workerinfo.lua",
    "handoff.lua",
    "config.lua",
    "api.lua",
)


_SERVER_TIME = "local CALLER_TIME = false\n"


@cache
def script_text(caller_time: bool = False) -> str:
    """Return the assembled script (cached per process).

    `caller_time` builds the testing variant that takes every caller's `now` as given instead
    of bounding it by the server's clock, so tests can move time; it is never used otherwise.
    """
    package = resources.files("django_qless") / "lua"
    parts = []
    for name in MANIFEST:
        source = (package / name).read_text(encoding="utf-8")
        parts.append(f"-- ==== {name} ====\n{source.rstrip()}\n")
    text = "\n".join(parts)
    if caller_time:
        if text.count(_SERVER_TIME) != 1:
            raise AssertionError("api.lua must set CALLER_TIME = false once")
        text = text.replace(_SERVER_TIME, "local CALLER_TIME = true\n")
    return text


@cache
def script_sha(caller_time: bool = False) -> str:
    """Return the SHA1 that Redis will use for the assembled script."""
    text = script_text(caller_time).encode("utf-8")
    return hashlib.sha1(text).hexdigest()  # noqa: S324 - Redis's id


_ENTRY = "return main(KEYS, ARGV)\n"


@cache
def function_name(caller_time: bool = False) -> str:
    """Return the name of the engine's Redis function (one per engine version)."""
    return f"djqless_{script_sha(caller_time)[:16]}"


@cache
def library_text(caller_time: bool = False) -> str:
    """Return the engine as a Redis 7 function library.

    It registers `<name>` and `<name>_ro` (flag no-writes, still callable at maxmemory) with
    the EVAL protocol's arguments. The body runs on the first call, not at FUNCTION LOAD,
    because Redis exposes only `redis.register_function` while a library loads.
    """
    text = script_text(caller_time)
    if not text.endswith(_ENTRY):
        raise AssertionError("api.lua must end with the EVAL entry point")
    name = function_name(caller_time)
    return (
        f"#!lua name={name}\n"
        "local function build()\n"
        f"{text[: -len(_ENTRY)]}"
        "return main\n"
        "end\n"
        "local main = nil\n"
        "local function call(keys, args)\n"
        "  if not main then main = build() end\n"
        "  return main(keys, args)\n"
        "end\n"
        f"redis.register_function{{function_name='{name}', callback=call}}\n"
        f"redis.register_function{{function_name='{name}_ro', callback=call, "
        "flags={'no-writes'}}\n"
    )


def main() -> None:
    """Print the assembled script to stdout."""
    sys.stdout.write(script_text())


if __name__ == "__main__":
    main()
