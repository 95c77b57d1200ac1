"""Find which top-level statements of the engine's Lua a command can reach.

Under EVALSHA (Redis 6.2) every call re-runs the whole script body: each top-level helper is
a closure built again, each constant table filled again. A per-command script (a "bundle",
core/lua.py) keeps only the statements the command's code can reach. This module splits the
helper files into top-level statements, notes what each defines (`Q.<name>`, a local, a
module loader) and what names it mentions, and follows the mentions from the entry point and
the command's module loaders. It answers None, meaning "use the full script", whenever the
code does something the analysis cannot follow (the table Q used other than as `Q.<name>`,
a statement it cannot split).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Statement", "reachable", "split"]

# One Lua token: long comment, line comment, long string, quoted string, name, number, symbol.
_TOKEN = re.compile(
    r"""--\[(?P<lc>=*)\[.*?\](?P=lc)\]
      | --[^\n]*
      | \[(?P<ls>=*)\[.*?\](?P=ls)\]
      | "(?:[^"\\\n]|\\.)*"
      | '(?:[^'\\\n]|\\.)*'
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | 0[xX][0-9a-fA-F]+ | \d+\.?\d*(?:[eE][+-]?\d+)? | \.\d+
      | \.\.\.? | [=~<>]= | \S
    """,
    re.VERBOSE | re.DOTALL,
)
_OPEN_WORDS = frozenset({"function", "if", "do", "repeat"})
_CLOSE_WORDS = frozenset({"end", "until"})
_KEYWORDS = frozenset({
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
})
# Names that reach code or tables by a computed name: nothing can be pruned safely.
_OPAQUE = frozenset({"_G", "getfenv", "setfenv", "loadstring", "load", "rawget", "rawset"})


class Unsure(ValueError):
    """The analysis cannot tell what a statement reaches."""


@dataclass
class Statement:
    """One top-level statement: its text, what it defines, the names it mentions."""

    text: str
    defines: set[str] = field(default_factory=set)  # 'Q.x', a local name, or 'mod:<name>'
    mentions: set[str] = field(default_factory=set)  # 'Q.x' or a bare name
    root: bool = False  # kept whatever the command (defines nothing we can follow)


def _tokens(text: str) -> list[tuple[int, str]]:
    """Return (offset, token) for every token of `text` but comments."""
    out = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if not tok.startswith("--"):
            out.append((m.start(), tok))
    return out


def split(text: str) -> list[Statement]:
    """Split one file's text into its top-level statements (each with what follows it up to
    the next one, comments included). A statement starts at column 0, outside any block or
    bracket; raises Unsure if the file does not split cleanly."""
    toks = _tokens(text)
    starts: list[int] = []
    depth = 0
    for i, (pos, tok) in enumerate(toks):
        if depth == 0 and (pos == 0 or text[pos - 1] == "\n"):
            starts.append(i)
        if tok in _OPEN_WORDS or tok in "({[":
            depth += 1
        elif tok in _CLOSE_WORDS or tok in ")}]":
            depth -= 1
            if depth < 0:
                raise Unsure(f"unbalanced {tok!r} at offset {pos}")
    if depth != 0:
        raise Unsure("a block or bracket is left open at the end of the file")
    if toks and (not starts or starts[0] != 0):
        raise Unsure("code before the first top-level statement")
    stmts = []
    for n, first in enumerate(starts):
        last = starts[n + 1] if n + 1 < len(starts) else len(toks)
        begin = 0 if n == 0 else toks[first][0]
        end = toks[last][0] if last < len(toks) else len(text)
        stmts.append(_describe(text[begin:end], [t for _, t in toks[first:last]]))
    return stmts


def _describe(text: str, toks: list[str]) -> Statement:
    """Note what one statement defines and mentions."""
    st = Statement(text)
    # The mentions: Q.<name> pairs and bare names (not fields, not keywords).
    for i, tok in enumerate(toks):
        if not _is_name(tok) or tok in _KEYWORDS:
            continue
        if i > 0 and toks[i - 1] in (".", ":"):
            continue
        if tok in _OPAQUE:
            raise Unsure(f"{tok} reaches code by a computed name")
        if tok == "Q":
            after = toks[i + 1] if i + 1 < len(toks) else ""
            if after == "." and i + 2 < len(toks) and _is_name(toks[i + 2]):
                st.mentions.update(("Q", "Q." + toks[i + 2]))
            elif not (i == 1 and toks[0] == "local"):
                raise Unsure("the table Q is used other than as Q.<name>")
            continue
        st.mentions.add(tok)
    # The definitions, by the statement's form.
    if toks[:2] == ["local", "function"]:
        st.defines.add(toks[2])
    elif toks[0] == "local":
        i = 1
        while i < len(toks) and _is_name(toks[i]):
            st.defines.add(toks[i])
            if i + 1 < len(toks) and toks[i + 1] == ",":
                i += 2
            else:
                break
    elif toks[0] == "function":
        st.defines.add(_target(toks[1:]))
    elif toks[:3] == ["Q", ".", "mod"] and len(toks) > 5 and toks[3] == "." and toks[5] == "=":
        st.defines.add("mod:" + toks[4])
    elif _is_name(toks[0]) and toks[0] not in _KEYWORDS and _assigns(toks):
        st.defines.add(_target(toks))
        # (more targets: `a, b = ...`)
        depth, i = 0, 1
        while i < len(toks) and not (depth == 0 and toks[i] == "="):
            depth += toks[i] in "([{"
            depth -= toks[i] in ")]}"
            if depth == 0 and toks[i] == "," and i + 1 < len(toks):
                st.defines.add(_target(toks[i + 1:]))
            i += 1
    else:
        st.root = True
    return st


def _is_name(tok: str) -> bool:
    return tok[0].isalpha() or tok[0] == "_"


def _target(toks: list[str]) -> str:
    """Return what an assignment target (or function name) defines: 'Q.x' or a name."""
    if toks[0] == "Q" and len(toks) > 2 and toks[1] == ".":
        return "Q." + toks[2]
    return toks[0]


def _assigns(toks: list[str]) -> bool:
    """Tell whether a statement starting with a name is an assignment (not a call)."""
    depth = 0
    for tok in toks:
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
        elif depth == 0 and tok == "=":
            return True
        elif depth == 0 and tok not in (".", ",") and not _is_name(tok):
            return False
    return False


def reachable(
    helpers: list[Statement], loaders: dict[str, Statement], roots: list[Statement],
    modules: tuple[str, ...], gated: tuple[tuple[str, str], ...] = (),
) -> set[int]:
    """Return the ids (id()) of the helper and loader statements reachable from `roots` and
    the loaders of `modules`. `gated` pairs (gate, module): the module's loader becomes a
    root once the name `gate` is reached (the hand-off runs only for noted wake-ups)."""
    by_name: dict[str, list[Statement]] = {}
    for st in helpers:
        for name in st.defines:
            by_name.setdefault(name, []).append(st)
    kept: set[int] = set()
    seen: set[str] = set()
    todo: list[Statement] = [*roots, *(st for st in helpers if st.root)]
    todo += [loaders[m] for m in modules if m in loaders]
    pending = list(gated)
    while todo:
        while todo:
            st = todo.pop()
            if id(st) in kept:
                continue
            kept.add(id(st))
            for name in st.mentions - seen:
                seen.add(name)
                todo.extend(by_name.get(name, ()))
        for gate, mod in list(pending):
            if gate in seen:
                pending.remove((gate, mod))
                if mod in loaders:
                    todo.append(loaders[mod])
    return kept
