"""Find which top-level statements of the engine's Lua a command can reach.

Under EVALSHA (Redis 6.2) every call re-runs the whole script body: each top-level helper is
a closure built again, each constant table filled again. A per-command script (a "bundle",
core/lua_bundles.py) keeps only the statements the command's code can reach. This module splits the
helper files into top-level statements, notes what each defines (`Q.<name>`, a local, a
module loader) and what names it mentions, and follows the mentions from the entry point and
the command's module loaders. It answers None, meaning "use the full script", whenever the
code does something the analysis cannot follow (the table Q used other than as `Q.<name>`,
a statement it cannot split).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Loader", "Statement", "reachable", "split", "split_loader"]

# One Lua token: name (first: the most common, and no other kind starts with a letter or _),
# long comment, line comment, long string, quoted string, number, symbol.
_TOKEN = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | --\[(?P<lc>=*)\[.*?\](?P=lc)\]
      | --[^\n]*
      | \[(?P<ls>=*)\[.*?\](?P=ls)\]
      | "(?:[^"\\\n]|\\.)*"
      | '(?:[^'\\\n]|\\.)*'
      | 0[xX][0-9a-fA-F]+ | \d+\.?\d*(?:[eE][+-]?\d+)? | \.\d+
      | \.\.\.? | [=~<>]= | \S
    """,
    re.VERBOSE | re.DOTALL,
)
# A line ending in one of these continues the statement on the next line.
_CONTINUES = frozenset({
    "..", "+", "-", "*", "/", "%", "^", "#", "=", "==", "~=", "<", ">", "<=", ">=", ",",
    "and", "or", "not", "(", "{", "[", ".", ":", "local", "function", "return", "in",
})
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
    # (offset in `text`, token) of its tokens, so a loader's body is not tokenized again
    tokens: list[tuple[int, str]] = field(default_factory=list, repr=False)


def _tokens(text: str) -> list[tuple[int, str]]:
    """Return (offset, token) for every token of `text` but comments."""
    out = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if not tok.startswith("--"):
            out.append((m.start(), tok))
    return out


def split(text: str, indent: str = "", toks: list[tuple[int, str]] | None = None
          ) -> list[Statement]:
    """Split one file's text (or a loader's body indented by `indent`) into its top-level
    statements, each with what follows it up to the next one, comments included. A
    statement starts at the line's indent, outside any block or bracket; raises Unsure if
    the text does not split cleanly. `toks`: the text's tokens, if known."""
    if toks is None:
        toks = _tokens(text)
    starts: list[int] = []
    depth = 0
    lead = "\n" + indent
    for i, (pos, tok) in enumerate(toks):
        if depth == 0 and (text[max(pos - len(lead), 0):pos] == lead or pos == len(indent)
                           and text[:pos] == indent):
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
    for i in starts[1:]:
        if toks[i - 1][1] in _CONTINUES or not _is_name(toks[i][1]):
            raise Unsure(f"a statement continues at offset {toks[i][0]}")
    stmts = []
    for n, first in enumerate(starts):
        last = starts[n + 1] if n + 1 < len(starts) else len(toks)
        begin = 0 if n == 0 else toks[first][0]
        end = toks[last][0] if last < len(toks) else len(text)
        st = _describe(text[begin:end], [t for _, t in toks[first:last]])
        if any(name.startswith("mod:") for name in st.defines):  # a loader: split_loader
            st.tokens = [(pos - begin, tok) for pos, tok in toks[first:last]]
        stmts.append(st)
    return stmts


@dataclass
class Loader:
    """A module loader `Q.mod.<name> = function() <body> end` split into its statements."""

    head: str  # up to the body's first statement
    body: list[Statement]
    tail: str  # the closing `end` and what follows


_LOADER_HEAD = re.compile(r"Q\.mod\.\w+ = function\(\)[ \t]*\n")


def split_loader(st: Statement, module: str) -> Loader | None:
    """Split a loader's body (indented two spaces) into statements whose local names are
    qualified by the module ('<module>/<name>'); None if it does not split cleanly."""
    head = _LOADER_HEAD.search(st.text)
    end = st.text.rstrip().rfind("\nend")
    if head is None or end < head.end():
        return None
    start, stop = head.end(), end + 1
    toks = [(pos - start, tok) for pos, tok in st.tokens if start <= pos < stop]
    try:
        body = split(st.text[start:stop], "  ", toks if st.tokens else None)
    except Unsure:
        return None
    if not body:
        return None
    local = {n for b in body for n in b.defines if "." not in n and ":" not in n}

    def scoped(names: set[str]) -> set[str]:
        return {f"{module}/{n}" if n in local else n for n in names}

    for b in body:
        b.defines, b.mentions = scoped(b.defines), scoped(b.mentions)
    return Loader(st.text[:head.end()], body, st.text[end + 1:])


def _describe(text: str, toks: list[str]) -> Statement:
    """Note what one statement defines and mentions."""
    st = Statement(text)
    # A command's entry (`C['name'] = ...`) defines 'cmd:name'; any `x['name']` mentions it
    # (a constructor's key, `{ ['name'] = v }`, is no mention: Q.DEFAULTS names 'heartbeat').
    for i in range(len(toks) - 2):
        if toks[i] == "[" and toks[i + 1][:1] in "'\"" and toks[i + 2] == "]":
            name = toks[i + 1][1:-1]
            if i == 1 and len(toks) > 4 and toks[4] == "=":
                st.defines.add("cmd:" + name)
            elif not (i > 0 and toks[i - 1] in ("{", ",", ";") and i + 3 < len(toks)
                      and toks[i + 3] == "="):
                st.mentions.add("cmd:" + name)
    # `Q.need('a,b')` at a branch loads modules a and b there: 'need:a', 'need:b' (a bundle
    # holds their loaders once the call is reached; they run only when it runs).
    for i in range(len(toks) - 5):
        if (toks[i] == "Q" and toks[i + 2] == "need" and toks[i + 1] == "."
                and toks[i + 3] == "(" and toks[i + 4][:1] in "'\"" and toks[i + 5] == ")"):
            st.mentions.update("need:" + m for m in toks[i + 4][1:-1].split(","))
    # The mentions: Q.<name> pairs and bare names (not fields, not keywords).
    for i, tok in enumerate(toks):
        c = tok[0]
        if not (c.isalpha() or c == "_") or tok in _KEYWORDS:  # (_is_name, inlined: hot)
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
    elif st.defines:
        pass  # a command's entry
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
    helpers: list[Statement], roots: list[Statement], modules: dict[str, list[Statement]],
    included: tuple[str, ...], gated: tuple[tuple[str, str], ...] = (),
) -> set[int]:
    """Return the ids (id()) of the statements reachable from `roots`: helpers, and the
    statements of the `included` modules' loaders (`modules`: name -> its statements; a
    module's statements that define nothing are kept whenever it is included). `gated`
    pairs (gate, module): the module is included once the name `gate` is reached (the
    hand-off runs only for noted wake-ups)."""
    by_name: dict[str, list[Statement]] = {}
    kept: set[int] = set()
    seen: set[str] = set()
    todo: list[Statement] = [*roots]

    def include(stmts: list[Statement]) -> None:
        for st in stmts:
            if st.root or not st.defines:
                todo.append(st)
            for name in st.defines:
                by_name.setdefault(name, []).append(st)
                if name in seen:
                    todo.append(st)

    include(helpers)
    for mod in included:
        include(modules.get(mod, []))
    pending = [g for g in gated if g[1] not in included]
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
                include(modules.get(mod, []))
    return kept
