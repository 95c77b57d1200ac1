"""Per-command scripts for servers without functions (Redis 6.2): a command's bundle keeps
of the engine only what its code can reach, since EVALSHA re-runs the whole body on every call.

The statements come from lua_reach.py's split of each source file; docs/engine.md,
"Per-command scripts on servers without functions", says what is kept, deferred and why.
"""

from __future__ import annotations

import re
from functools import cache

from .lua import (
    _DECL,
    MANIFEST,
    _built,
    _routes_block,
    _sha1,
    _sources,
    _with_clock,
    routes,
)
from .reach import Loader, Statement, Unsure, reachable, split, split_loader

__all__ = ["bundle_sha", "bundle_text", "unresolved"]


# The hand-off (Q.flush_wake) runs only for queues that Q.wake noted this call: a bundle whose
# code never reaches Q.wake leaves the hand-off's modules out.
_WAKE_GATE = "Q.wake"
_WAKE_NOTE = re.compile(r"insert\(\s*ctx\.woken_list|woken_list\[[^\]]*\]\s*=")


# Each file's top-level statements, the module loaders, their split bodies (_statements).
_Analysed = tuple[dict[str, list[Statement]], dict[str, Statement], dict[str, Loader | None]]


@cache
def _statements() -> _Analysed | None:
    """Return each file's top-level statements, the module loaders and their split bodies
    (None: kept whole), or None if the sources cannot be analysed (then every command uses
    the full script)."""
    sources = _sources()
    try:
        files = {mod: split(text) for mod, text in sources.items()}
    except Unsure:
        return None
    loaders = {}
    for stmts in files.values():
        for st in stmts:
            for name in st.defines:
                if name.startswith("mod:"):
                    loaders[name[4:]] = st
    bodies = {mod: split_loader(st, mod) for mod, st in loaders.items()}
    for st in (*(st for stmts in files.values() for st in stmts),
               *(b for lo in bodies.values() if lo is not None for b in lo.body)):
        st.tokens = []  # (only split_loader needed them: not kept for the process's life)
    return files, loaders, bodies


@cache
def _entry_modules() -> list[str]:
    """Return the modules that declare `--@ entry` (the roots of every bundle)."""
    return [mod for mod, text in _sources().items()
            if [m.group(1) for m in _DECL.finditer(text)] == ["entry"]]


# The loader a bundle makes of its deferred helpers (bundle_text), and the call that runs it
# first in every loader its route does not load.
_COLD = "_cold"
_COLD_NEED = f"  Q.need('{_COLD}')\n"


@cache
def _reach(command: str) -> tuple[set[int], list[str], dict[str, list[Statement]],
                                  set[int], set[str], _Analysed] | None:
    """Return what `command`'s bundle keeps: the ids of its statements, the `Q` fields made on
    every call, the loaders' statements by module, the ids of the helpers it defers, the
    modules loaded only at a branch, and the analysis these ids refer to (threads building
    their first bundles at once may each get their own: use this one) (None: no bundle)."""
    analysed = _statements()
    table = routes()
    if analysed is None or command not in table:
        return None
    files, loaders, split_loaders = analysed
    handoff = _built()[1]
    entry = _entry_modules()
    loader_ids = {id(st) for st in loaders.values()}
    helpers = [st for mod, stmts in files.items() if mod not in entry for st in stmts
               if id(st) not in loader_ids]
    roots = [st for mod in entry for st in files[mod]]
    roots.append(Statement("", mentions={"cmd:" + command}))
    modules: dict[str, list[Statement]] = {}
    for mod, st in loaders.items():
        body = split_loaders[mod]
        modules[mod] = body.body if body is not None else [
            Statement(st.text, mentions=st.mentions, root=True)]
    notes = [st for st in helpers if _WAKE_NOTE.search(st.text)]
    if all(_WAKE_GATE in st.defines for st in notes):
        gated = tuple((_WAKE_GATE, m) for m in handoff)
        included = table[command]
    else:  # something else notes wake-ups: the hand-off may always run
        gated, included = (), (*table[command], *handoff)
    # (a module a reached `Q.need('<module>')` loads at its branch)
    gated += tuple(("need:" + m, m) for m in loaders)
    kept = reachable(helpers, roots, modules, included, gated)
    cold = _deferred(files, helpers, roots, modules, kept,
                     reachable(helpers, roots, modules, included))
    lazy = {mod for mod in modules if mod not in included
            and any(id(b) in kept for b in modules[mod])}
    # Q's fields made on every call size its constructor (false until defined: the engine
    # tests fields for truth only): no rehash as they are added one by one (_presized).
    always = [*helpers, *(st for mod in included for st in modules.get(mod, []))]
    fields = sorted({n[2:] for st in always if id(st) in kept and id(st) not in cold
                     for n in st.defines if n.startswith("Q.")})
    return kept, fields, modules, cold, lazy, analysed


def _deferred(files: dict[str, list[Statement]], helpers: list[Statement],
              roots: list[Statement], modules: dict[str, list[Statement]], kept: set[int],
              hot: set[int]) -> set[int]:
    """Return the ids of the kept helpers that only modules loaded at a branch (the hand-off,
    a `Q.need` of a module the route does not load) reach: bundle_text moves them into a
    loader those modules run first, so a call that takes no such branch does not build them.

    A statement moves when it defines `Q` fields or locals (nothing else), no other kept
    statement defines one of its fields, every kept statement naming one of its locals moves
    too (a loader's body never sees them), and every other name it mentions is defined by one
    top-level statement at most (moved later in the script it still sees that one)."""
    defined: dict[str, int] = {}
    for stmts in files.values():
        for st in stmts:
            for n in st.defines:
                defined[n] = defined.get(n, 0) + 1
    by_field: dict[str, int] = {}
    for st in helpers:
        if id(st) in kept:
            for n in st.defines:
                by_field[n] = by_field.get(n, 0) + 1
    moving = {id(st): st for st in helpers
              if id(st) in kept and id(st) not in hot and st.defines and not st.root
              and all(by_field[n] == 1 and (n.startswith("Q.") or n.isidentifier())
                      for n in st.defines)
              and all(defined.get(n, 0) <= 1 for n in st.mentions if not n.startswith("Q."))}
    users = [*roots, *(st for st in helpers if id(st) in kept)]
    users += [b for body in modules.values() for b in body if id(b) in kept]
    changed = True
    while changed:  # (a local stays if anything staying names it)
        changed = False
        staying = {n for st in users if id(st) not in moving for n in st.mentions}
        for key, st in list(moving.items()):
            if any(not n.startswith("Q.") and n in staying for n in st.defines):
                del moving[key]
                changed = True
    return set(moving)


def unresolved(command: str) -> set[str]:
    """Return the `Q.<name>` fields that `command`'s bundle mentions but never defines (a
    helper moved into a module that neither its route nor a `Q.need` at a branch loads)."""
    reach = _reach(command)
    if reach is None:
        return set()
    kept, _, modules, _, _, (files, _, _) = reach
    stmts = [*(st for f in files.values() for st in f), *(b for m in modules.values() for b in m)]
    used = [st for st in stmts if id(st) in kept]
    mentioned = {n for st in used for n in st.mentions if n.startswith("Q.")}
    return mentioned - {n for st in used for n in st.defines}


@cache
def bundle_text(command: str, caller_time: bool = False) -> str | None:
    """Return the script for `command` alone: the entry point, and of the helpers and of its
    modules' loaders only the statements its code can reach (for EVALSHA, which re-runs the
    whole body on every call). None when the command is unknown or the analysis is unsure:
    use the full script. Its replies are the full script's for this command; any other
    command is unknown to it.
    """
    reach = _reach(command)
    if reach is None:
        return None
    kept, fields, modules, cold, lazy, (files, loaders, split_loaders) = reach
    entry = _entry_modules()
    last_helpers = max(i for i, name in enumerate(MANIFEST)
                       if name[:-4] not in loaders and name[:-4] not in entry)
    parts = [_routes_block(command)]
    deferred: list[str] = []
    for i, name in enumerate(MANIFEST):
        out = []
        for st in files[name[:-4]]:
            owner = next((m for m, lo in loaders.items() if lo is st), None)
            if owner is None:
                if id(st) in cold:
                    deferred.append(st.text)
                elif id(st) in kept or name[:-4] in entry:
                    out.append(_presized(st.text, fields) if "Q" in st.defines else st.text)
                continue
            inner = [b.text for b in modules[owner] if id(b) in kept]
            split_body = split_loaders[owner]
            if inner:
                text = (st.text if split_body is None
                        else split_body.head + "".join(inner) + split_body.tail)
                if cold and owner in lazy:  # (its helpers first)
                    head = _LOADER_HEAD.search(text)
                    if head is None:
                        raise AssertionError(f"no loader head in {name}")
                    text = text[:head.end()] + _COLD_NEED + text[head.end():]
                out.append(text)
        if i == last_helpers and deferred:
            # (after every helper file: each local the deferred statements name is in scope)
            out.append("-- (helpers only loaders run at a branch reach: built when one runs)\n"
                       f"Q.mod.{_COLD} = function()\n{''.join(deferred).rstrip()}\n"
                       f"end -- {_COLD}\n")
        if out:
            parts.append(f"-- ==== {name} ====\n{''.join(out).rstrip()}\n")
    return _with_clock("\n".join(parts), caller_time)


_LOADER_HEAD = re.compile(r"Q\.mod\.\w+ = function\(\)[ \t]*\n")


_EMPTY_Q = "\nlocal Q = {}\n"

def _presized(text: str, fields: list[str]) -> str:
    """Return the statement `local Q = {}` with enough of `fields` in its constructor that its
    hash part holds them all.

    Lua sizes a constructor's hash part to the power of two at or above its field count, and
    each field it lists costs one insertion: listing just over half of the final power of two
    presizes as well as listing them all, for fewer insertions (1.5-5k instructions a call)."""
    if text.count(_EMPTY_Q) != 1 or not fields:
        return text
    lines, line = [], " "
    size = 1 << (len(fields) - 1).bit_length()  # the power of two at or above len(fields)
    for name in fields[: min(len(fields), size // 2 + 1)]:
        if len(line) + len(name) > 84:
            lines.append(line)
            line = " "
        line += f" {name} = false,"
    constructor = "{\n" + "\n".join([*lines, line]) + "\n}"
    return text.replace(_EMPTY_Q, f"\nlocal Q = {constructor}\n")


@cache
def bundle_sha(command: str, caller_time: bool = False) -> str | None:
    """Return the SHA1 of `command`'s bundle, or None if it has none (bundle_text)."""
    text = bundle_text(command, caller_time)
    return None if text is None else _sha1(text)
