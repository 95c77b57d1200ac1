"""Assemble the engine's Lua sources into the one script every client loads.

`python -m django_qless.core.engine.lua` prints the assembled script, so any qless client
(Ruby, Python, Go) can load our engine in place of qless-core's. On Redis 7+ our own
client loads the same code as a function library instead (`library_text`): a function's
top level runs once per server, where EVALSHA re-runs the whole script body on every call.
"""

from __future__ import annotations

import hashlib
import re
import sys
from functools import cache
from importlib import resources

__all__ = [
    "MANIFEST", "EngineBuildError", "function_name", "library_text", "routes", "script_sha",
    "script_text",
]

# Concatenation order: helpers first, the loader modules, the entry point last.
MANIFEST: tuple[str, ...] = (
    "keyspace.lua",
    "base.lua",
    "events.lua",
    "validate.lua",
    "lists.lua",
    "history.lua",
    "objects.lua",
    "samples.lua",
    "throttle.lua",
    "throttle_cmds.lua",
    "job.lua",
    "advance.lua",
    "complete.lua",
    "jobmeta.lua",
    "putmove.lua",
    "put.lua",
    "spawn.lua",
    "recur.lua",
    "cron.lua",
    "timers.lua",
    "ratelimit.lua",
    "queuescan.lua",
    "lapse.lua",
    "pop.lua",
    "queries.lua",
    "worker.lua",
    "workerinfo.lua",
    "handoff.lua",
    "config.lua",
    "api.lua",
)

# The module a hand-off (Q.flush_wake in events.lua) loads, with what it needs.
_HANDOFF = "handoff"


class EngineBuildError(ValueError):
    """A Lua source's `--@` declarations are inconsistent: the engine cannot be built."""


def _read_sources() -> dict[str, str]:
    """Return every manifest file's text by module name (file name without `.lua`), in a
    dict of the caller's own."""
    return dict(_sources())


@cache
def _sources() -> dict[str, str]:
    """Read the manifest's files once per process (every bundle is built from them)."""
    package = resources.files("django_qless") / "lua"
    present = {p.name for p in package.iterdir() if p.name.endswith(".lua")}
    if present != set(MANIFEST):
        raise EngineBuildError(
            f"lua/ files and MANIFEST differ: {sorted(present ^ set(MANIFEST))}"
        )
    return {n[:-4]: (package / n).read_text(encoding="utf-8") for n in MANIFEST}


_DECL = re.compile(r"^--@ (\S+)(.*)$", re.MULTILINE)
_NEED = re.compile(r"Q\.need\('([^']*)'\)")
_COMMAND = re.compile(r"^[a-z][a-z.\-]*$")


def build_routes(sources: dict[str, str]) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Read the `--@` declarations of `sources` (module name -> text).

    A file is a loader module (`Q.mod.<name> = function()`) unless it says `--@ helpers` or
    `--@ entry`; `--@ needs m...` names the modules its loader needs first; `--@ command c
    [m...]` says it implements command `c`, which also needs modules `m`. Returns command ->
    modules in load order, and the hand-off's modules. Raises EngineBuildError on an unknown
    module or verb, a command declared twice or one the file does not register.
    """
    needs: dict[str, list[str]] = {}
    commands: dict[str, tuple[str, list[str]]] = {}
    missing: list[str] = []
    for mod, text in sources.items():
        kinds = [m.group(1) for m in _DECL.finditer(text)]
        if "helpers" in kinds or "entry" in kinds:
            if set(kinds) - {"helpers", "entry"} or "Q.mod." + mod in text:
                raise EngineBuildError(f"{mod}.lua: a helpers/entry file declares no module")
            continue
        if text.count(f"\nQ.mod.{mod} = function()") != 1 or text.count("\nQ.mod.") != 1:
            raise EngineBuildError(f"{mod}.lua must define exactly one loader, Q.mod.{mod}")
        needs[mod] = []
        for m in _DECL.finditer(text):
            kind, words = m.group(1), m.group(2).split()
            if kind == "needs":
                needs[mod] += words
            elif kind == "command" and words and _COMMAND.match(words[0]):
                name = words[0]
                if name in commands:
                    raise EngineBuildError(
                        f"command {name} declared twice: {commands[name][0]}.lua and {mod}.lua"
                    )
                if f"C['{name}'] = " not in text:
                    missing.append(f"{mod}.lua declares {name} but does not define it")
                commands[name] = (mod, words[1:])
            else:
                raise EngineBuildError(f"{mod}.lua: bad declaration {m.group(0)!r}")
        defined = set(re.findall(r"C\['([^']+)'\] = ", text))
        undeclared = defined - {c for c, (m2, _) in commands.items() if m2 == mod}
        if undeclared:
            raise EngineBuildError(f"{mod}.lua defines undeclared commands {sorted(undeclared)}")
    if missing:
        raise EngineBuildError("; ".join(missing))

    def order(mods: list[str], out: list[str], path: tuple[str, ...] = ()) -> list[str]:
        for m in mods:
            if m not in needs:
                raise EngineBuildError(f"unknown module {m!r} (needed via {' > '.join(path)})")
            if m in path:
                raise EngineBuildError(f"modules need each other: {' > '.join((*path, m))}")
            if m not in out:
                order(needs[m], out, (*path, m))
                out.append(m)
        return out

    table = {
        c: tuple(order([*extra, mod], [], (f"command {c}",)))
        for c, (mod, extra) in commands.items()
    }
    # A module loaded at a branch (`Q.need('a,b')`) is known, and follows what it needs.
    for mod, text in sources.items():
        for literal in _NEED.findall(text):
            names = literal.split(",")
            for i, m in enumerate(names):
                if m not in needs:
                    raise EngineBuildError(f"{mod}.lua: Q.need of unknown module {m!r}")
                early = [n for n in order([m], []) if n != m and n not in names[:i]]
                if early:
                    raise EngineBuildError(
                        f"{mod}.lua: Q.need('{literal}') loads {m} before {', '.join(early)}")
    return table, tuple(order([_HANDOFF], [], ("hand-off",)))


@cache
def _built() -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Return build_routes of the package's sources (once per process)."""
    return build_routes(_sources())


def routes() -> dict[str, tuple[str, ...]]:
    """Return command -> the modules it loads, as built into the script."""
    return _built()[0]


def _routes_block(only: str | None = None) -> str:
    """Return the generated Lua that api.lua and base.lua read: ROUTES and HANDOFF_MODS
    (`only`: the route of that one command, for its bundle)."""
    table, handoff = _built()
    if only is not None:
        table = {only: table[only]}
    # Every entry is preceded by a space: main() finds ' <command>=' with one plain find.
    lines = "".join(f" {c}={','.join(m)}\n" for c, m in sorted(table.items()))
    return (
        "-- ==== routes (generated by core/engine/lua.py from the files' --@ declarations) ====\n"
        f"local ROUTES = [[\n{lines}]]\n"
        f"local HANDOFF_MODS = '{','.join(handoff)}'\n"
    )


_SERVER_TIME = "local CALLER_TIME = false\n"


@cache
def script_text(caller_time: bool = False) -> str:
    """Return the assembled script (cached per process).

    `caller_time` builds the testing variant that takes every caller's `now` as given instead
    of bounding it by the server's clock, so tests can move time; it is never used otherwise.
    """
    sources = _sources()
    parts = [_routes_block()]
    for name in MANIFEST:
        parts.append(f"-- ==== {name} ====\n{sources[name[:-4]].rstrip()}\n")
    return _with_clock("\n".join(parts), caller_time)


@cache
def script_sha(caller_time: bool = False) -> str:
    """Return the SHA1 that Redis will use for the assembled script."""
    return _sha1(script_text(caller_time))


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()  # noqa: S324 - Redis's id


def _with_clock(text: str, caller_time: bool) -> str:
    """Return `text`, made to take every caller's `now` as given for `caller_time`."""
    if caller_time:
        if text.count(_SERVER_TIME) != 1:
            raise AssertionError("api.lua must set CALLER_TIME = false once")
        text = text.replace(_SERVER_TIME, "local CALLER_TIME = true\n")
    return text


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
