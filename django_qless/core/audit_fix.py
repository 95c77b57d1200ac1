"""Repairs for `audit(fix=True)`: one small Lua script, each operation atomic and re-checked.

Every operation re-reads the job inside the script and acts only if the problem is still
there, so a repair racing a live worker cannot undo the worker's move. What is repaired:
ghost index entries dropped; a job re-indexed per its state (a running job with no lease
becomes stalled, so it runs again: at-least-once); dependency edges made symmetric or
dropped; tag counters recounted; `ql:failures` synced; throttle slots of jobs that are
not running released (and waiting jobs admitted); queue `due` bounds reset; orphan keys
deleted. Nothing is guessed: unknown states and bad retry counts are only reported.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from .audit import Violation

__all__ = ["FIX_LUA", "plan", "repair"]

# The script lives in audit_fix.lua, read as package data like the engine's own files.
FIX_LUA = (resources.files("django_qless") / "core" / "audit_fix.lua").read_text(encoding="utf-8")

# index-entry subjects: key prefix/suffix -> (kind, owner extractor)
_QUEUE_KINDS = ("work", "locks", "scheduled", "depends", "throttled", "recur")


def index_kind(key: str) -> tuple[str, str] | None:
    """Return (kind, owner) of an index key, as the fix script's `drop` expects."""
    if key.startswith("ql:q:"):
        queue, _, kind = key[5:].rpartition("-")
        return (kind, queue) if kind in _QUEUE_KINDS else None
    if key == "ql:completed":
        return "completed", ""
    if key == "ql:tracked":
        return "tracked", ""
    if key.startswith("ql:f:"):
        return "failed", key[5:]
    if key.startswith("ql:w:") and key.endswith(":jobs"):
        return "worker", key[5:-5]
    if key.startswith("ql:th:") and key.endswith("-locks"):
        return "thlocks", key[6:-6]
    if key.startswith("ql:th:") and key.endswith("-pending"):
        return "thpending", key[6:-8]
    if key.startswith("ql:t:"):
        return "tag", key[5:]
    return None


def _edge(key: str, other: str) -> tuple[str, str] | None:
    """Return (dependent, dependency) of an edge named by a dependency-set subject."""
    if key.endswith("-dependencies"):
        return key[5:-13], other
    if key.endswith("-dependents"):
        return other, key[5:-11]
    return None


def plan(v: Violation) -> list[tuple[str, ...]]:
    """Return the fix-script operations that repair one violation (empty: not fixable)."""
    if not v.fixable:
        return []
    key, _, member = v.subject.partition(" ")
    if not key.startswith("ql:"):
        return [("reindex", v.subject)]
    if v.invariant in ("deps.symmetry", "deps.ghost"):
        edge = _edge(key, member)
        return [("edge", *edge)] if edge else []
    if v.invariant == "orphan.key":
        for suffix in ("-history", "-dependencies", "-dependents"):
            if key.endswith(suffix):
                return [("orphan", key, key[5:-len(suffix)])]
        return []
    if v.invariant == "tags.counter":
        return [("tagcount", key[5:])]
    if v.invariant == "failures.set":
        return [("failures", key[5:])]
    if v.invariant == "queue.meta":
        return [("meta", member)]
    if v.invariant == "recur.index" and not member:
        return [("recur", key[5:])]
    kind = index_kind(key)
    if member and kind:
        return [("drop", key, kind[0], kind[1], member)]
    return []


def repair(r: redis.Redis, violations: list[Violation]) -> list[str]:
    """Run the repairs for `violations`; return what was done, in order."""
    script = r.register_script(FIX_LUA)
    seconds, micros = r.time()
    now = f"{int(seconds) + int(micros) / 1e6:.6f}"
    done: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for v in violations:
        for operation in plan(v):
            if operation in seen:
                continue
            seen.add(operation)
            notes = script(keys=[], args=[operation[0], now, *operation[1:]])
            done.extend(str(n) for n in notes or [])
    return done
