"""Repairs for `audit(fix=True)`: one small Lua script, each operation atomic and re-checked.

Every operation re-reads the job inside the script and acts only if the problem is still
there, so a repair racing a live worker cannot undo the worker's move. What is repaired:
ghost index entries dropped; a job re-indexed per its state (a running job with no lease
becomes stalled, so it runs again: at-least-once); dependency edges made symmetric or
dropped; tag counters recounted; `ql:failures` synced; throttle slots of jobs that are
not running released (and waiting jobs admitted); queue `due` bounds reset; orphan keys
deleted. Nothing is guessed: unknown states and bad retry counts are only reported.
The script gets the keyspace's prefix as its one key (none for the default keyspace), so a
shard's repairs run on the cluster node holding its slot.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

import redis

from ..engine.invoke import DEFAULT, Keyspace

if TYPE_CHECKING:
    from .auditor import Violation

__all__ = ["FIX_LUA", "plan", "repair"]

# The script lives in fix.lua, read as package data like the engine's own files.
FIX_LUA = (resources.files("django_qless") / "core" / "audit" / "fix.lua").read_text(
    encoding="utf-8"
)

# index-entry subjects: key prefix/suffix -> (kind, owner extractor)
_QUEUE_KINDS = ("work", "locks", "scheduled", "depends", "throttled", "recur")


def index_kind(key: str, ks: Keyspace = DEFAULT) -> tuple[str, str] | None:
    """Return (kind, owner) of an index key of `ks`, as the fix script's `drop` expects."""
    if not key.startswith(ks.prefix):
        return None
    name = ks.name(key)
    if name.startswith("q:"):
        queue, _, kind = name[2:].rpartition("-")
        return (kind, queue) if kind in _QUEUE_KINDS else None
    if name == "completed":
        return "completed", ""
    if name == "tracked":
        return "tracked", ""
    if name.startswith("f:"):
        return "failed", name[2:]
    if name.startswith("w:") and name.endswith(":jobs"):
        return "worker", name[2:-5]
    if name.startswith("th:") and name.endswith("-locks"):
        return "thlocks", name[3:-6]
    if name.startswith("th:") and name.endswith("-pending"):
        return "thpending", name[3:-8]
    if name.startswith("t:"):
        return "tag", name[2:]
    return None


def _edge(name: str, other: str) -> tuple[str, str] | None:
    """Return (dependent, dependency) of an edge named by a dependency-set subject (its
    name without the keyspace prefix)."""
    if name.endswith("-dependencies"):
        return name[2:-13], other
    if name.endswith("-dependents"):
        return other, name[2:-11]
    return None


def plan(v: Violation, ks: Keyspace = DEFAULT) -> list[tuple[str, ...]]:
    """Return the fix-script operations that repair one violation of `ks` (empty: not
    fixable)."""
    if not v.fixable:
        return []
    key, _, member = v.subject.partition(" ")
    if not key.startswith(ks.prefix):
        return [("reindex", v.subject)]
    name = ks.name(key)
    if v.invariant in ("deps.symmetry", "deps.ghost"):
        edge = _edge(name, member)
        return [("edge", *edge)] if edge else []
    if v.invariant == "orphan.key":
        for suffix in ("-history", "-dependencies", "-dependents"):
            if name.endswith(suffix):
                return [("orphan", key, name[2:-len(suffix)])]
        return []
    if v.invariant == "tags.counter":
        return [("tagcount", name[2:])]
    if v.invariant == "failures.set":
        return [("failures", name[2:])]
    if v.invariant == "queue.meta":
        return [("meta", member)]
    if v.invariant == "recur.index" and not member:
        return [("recur", name[2:])]
    kind = index_kind(key, ks)
    if member and kind:
        return [("drop", key, kind[0], kind[1], member)]
    return []


def repair(r: redis.Redis, violations: list[Violation], ks: Keyspace = DEFAULT) -> list[str]:
    """Run the repairs for `violations` of keyspace `ks` on `r` (the server holding it);
    return what was done, in order."""
    script = r.register_script(FIX_LUA)
    seconds, micros = r.time()
    now = f"{int(seconds) + int(micros) / 1e6:.6f}"
    done: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for v in violations:
        for operation in plan(v, ks):
            if operation in seen:
                continue
            seen.add(operation)
            notes = script(keys=list(ks.engine_keys), args=[operation[0], now, *operation[1:]])
            done.extend(str(n) for n in notes or [])
    return done
