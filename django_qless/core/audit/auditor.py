"""The invariant auditor: check that every job and every index agree.

`audit(client_or_redis)` walks one keyspace (`ql:*`, or a shard's `ql:{<tag>}:*` on the
server holding it now) with SCAN (never KEYS), in
batches; each batch of reads runs server-side in one read-only script call returning one
JSON text (far cheaper than parsing thousands of pipelined replies in Python), so memory
stays bounded by the batch size, not the data.
Two directions are checked: each job hash is in exactly the index its state implies (the
job pass), and each index entry points at an existing job that belongs there (the index
pass; this catches ghosts and cross-queue duplicates). A second, targeted pass re-checks
what the first one found, so a job moving between two reads on a live system is not
reported. `fix=True` repairs, through small atomic scripts that re-verify the condition,
whatever can be repaired without guessing (see `audit_fix.py`).

A deployment of many shards is audited one shard at a time (`audit_all`).
`python -m django_qless.core.audit --url URL [--fix] [--json]` (or `--cluster NODES --shards
N`) runs it from a shell (`audit_cli.py`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from ..engine.invoke import DEFAULT, Keyspace

if TYPE_CHECKING:
    from ..types import QlessClient

__all__ = ["AuditReport", "Reads", "Violation", "audit", "audit_all", "counted"]


def counted(n: int, word: str) -> str:
    """Return "1 job", "2 jobs": a count with its noun in the right number."""
    return f"{n} {word}{'' if n == 1 else 's'}"

BATCH = 500
# Jobs checked per server-side read batch: about ten reads each, a few ms of Redis time.
JOB_BATCH = 150
STATES = ("waiting", "running", "scheduled", "depends", "failed", "complete", "stalled",
          "throttled")
# state -> the queue index that state implies (failed/complete live outside queues)
STATE_INDEX = {"waiting": "work", "stalled": "work", "running": "locks",
               "scheduled": "scheduled", "depends": "depends", "throttled": "throttled"}
QUEUE_KINDS = ("work", "locks", "scheduled", "depends", "throttled")
FIELDS = ("state", "queue", "worker", "expires", "retries", "remaining", "tags", "failure",
          "throttles", "held", "grace", "tracked")


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its id, the jid or key concerned, and what was found."""

    invariant: str
    subject: str
    detail: str
    fixable: bool = True

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.subject}: {self.detail}"


@dataclass
class AuditReport:
    """What the audit found (and, with fix=True, what it repaired)."""

    violations: list[Violation] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    jobs: int = 0
    keys: int = 0
    shard: str | None = None

    @property
    def ok(self) -> bool:
        """Tell whether no violation remains."""
        return not self.violations

    def by_invariant(self) -> dict[str, int]:
        """Return the number of violations per invariant id."""
        out: dict[str, int] = {}
        for v in self.violations:
            out[v.invariant] = out.get(v.invariant, 0) + 1
        return dict(sorted(out.items()))

    def as_dict(self) -> dict[str, Any]:
        """Return the report as plain data (for --json)."""
        out: dict[str, Any] = {
            "ok": self.ok, "jobs": self.jobs, "keys": self.keys,
            "violations": [v.__dict__ for v in self.violations],
            "by_invariant": self.by_invariant(), "fixed": self.fixed,
        }
        if self.shard is not None:
            out["shard"] = self.shard
        return out

    def __str__(self) -> str:
        where = "" if self.shard is None else f" of shard {self.shard}"
        head = (f"audit{where}: {counted(self.jobs, 'job')}, {counted(self.keys, 'key')}, "
                f"{counted(len(self.violations), 'violation')}")
        lines = [head, *(f"  {v}" for v in self.violations), *(f"  fixed: {f}" for f in self.fixed)]
        return "\n".join(lines)


# Runs a batch of read commands and returns their replies as one JSON array (nil -> false).
READS_LUA = """
local cmds = cjson.decode(ARGV[1])
local out = {}
for i = 1, #cmds do out[i] = redis.call(unpack(cmds[i])) end
return cjson.encode(out)
"""


class Reads:
    """A pipeline-like batch of reads executed in one server-side script call."""

    def __init__(self, r: redis.Redis, keys: tuple[str, ...] = ()) -> None:
        self.r = r
        self.keys = list(keys)  # the shard prefix: declares the slot the reads touch
        self.commands: list[list[str]] = []
        self.kinds: list[str] = []

    def _add(self, kind: str, *command: str) -> None:
        self.kinds.append(kind)
        self.commands.append(list(command))

    def hmget(self, key: str, fields: list[str]) -> None:
        self._add("list", "HMGET", key, *fields)

    def hget(self, key: str, field: str) -> None:
        self._add("str", "HGET", key, field)

    def zscore(self, key: str, member: str) -> None:
        self._add("score", "ZSCORE", key, member)

    def lpos(self, key: str, member: str, count: int) -> None:
        self._add("list", "LPOS", key, member, "COUNT", str(count))

    def scard(self, key: str) -> None:
        self._add("int", "SCARD", key)

    def exists(self, key: str) -> None:
        self._add("int", "EXISTS", key)

    def sismember(self, key: str, member: str) -> None:
        self._add("int", "SISMEMBER", key, member)

    def execute(self) -> list[Any]:
        """Run the batch; return replies in order (missing values as None)."""
        if not self.commands:
            return []
        script = self.r.register_script(READS_LUA)
        raw = json.loads(script(keys=self.keys, args=[json.dumps(self.commands)]))
        out: list[Any] = []
        for kind, value in zip(self.kinds, raw, strict=True):
            if value is False:
                out.append(None)
            elif kind == "score":
                out.append(float(value))
            elif kind == "list":
                out.append([None if v is False else v for v in value] if value else [])
            else:
                out.append(value)
        self.commands, self.kinds = [], []
        return out


def target(client_or_redis: Any) -> tuple[redis.Redis, Keyspace]:
    """Return the decoding redis.Redis holding the keyspace of a core Client (the primary of
    its shard) or of a redis.Redis (the default keyspace)."""
    if isinstance(client_or_redis, redis.Redis):
        return as_redis(client_or_redis), DEFAULT
    node_redis = getattr(client_or_redis, "node_redis", None)
    keyspace = getattr(client_or_redis, "keyspace", None)
    if node_redis is None or not isinstance(keyspace, Keyspace):
        hint = " (audit each of its clients(): audit_all)" if hasattr(
            client_or_redis, "clients") else ""
        raise TypeError(f"expected a Client or redis.Redis, got "
                        f"{type(client_or_redis).__name__}{hint}")
    return as_redis(node_redis()), keyspace


def as_redis(conn: redis.Redis) -> redis.Redis:
    """Return `conn`, or a decoding redis.Redis on the same server."""
    pool = conn.connection_pool
    if pool.connection_kwargs.get("decode_responses"):
        return conn
    kwargs = {**pool.connection_kwargs, "decode_responses": True}
    new_pool = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=new_pool)


def chunks(items: Iterable[str], size: int = BATCH) -> Iterator[list[str]]:
    """Yield lists of at most `size` items."""
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def json_list(text: str | None) -> list[str]:
    """Decode a stored JSON list (tags, throttles, held); tolerate `{}`, '' and garbage."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def failure_group(text: str | None) -> str | None:
    """Return the group of a stored failure record."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return None
    group = value.get("group") if isinstance(value, dict) else None
    return group if isinstance(group, str) and group else None


def num(text: str | None) -> float | None:
    """Parse a stored number; None when empty or not a number."""
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


class Auditor:
    """One audit run; `only_jids`/`only_keys` restrict it (used by the re-check pass)."""

    def __init__(self, r: redis.Redis, ks: Keyspace = DEFAULT,
                 only_jids: set[str] | None = None, only_keys: set[str] | None = None) -> None:
        self.r = r
        self.ks = ks
        self.only_jids = only_jids
        self.only_keys = only_keys
        self.found: dict[tuple[str, str, str], Violation] = {}
        self.jobs = 0
        self.keys = 0

    def add(self, invariant: str, subject: str, detail: str, fixable: bool = True) -> None:
        """Record a violation (duplicates from SCAN are folded)."""
        self.found[(invariant, subject, detail)] = Violation(invariant, subject, detail, fixable)

    def key(self, name: str) -> str:
        """Return key `name` (without `ql:`) of the audited keyspace."""
        return self.ks.key(name)

    def name(self, key: str) -> str:
        """Return `key` (one of the keyspace's) without the keyspace's prefix."""
        return self.ks.name(key)

    def scan(self, glob: str, kind: str) -> Iterator[str]:
        """SCAN the keyspace's keys of one type whose name matches `glob`, or walk the
        restricted key list."""
        if self.only_keys is not None:
            for key in sorted(self.only_keys):
                if _glob_match(self.key(glob), key) and self.r.type(key) == kind:
                    yield key
            return
        # SCAN may return a key twice (during a rehash); findings are folded by subject, so
        # no set of seen keys is kept: memory stays bounded by the batch, not the data.
        for key in self.r.scan_iter(match=self.ks.pattern(glob), count=BATCH, _type=kind):
            self.keys += 1
            yield str(key)

    def run(self) -> list[Violation]:
        """Run every check; return the violations found."""
        from . import checks as checks

        checks.check_jobs(self)
        if self.only_jids is None or self.only_keys:
            checks.check_indexes(self)
            checks.check_dependencies(self)
            checks.check_tags(self)
            checks.check_misc(self)
        return list(self.found.values())

    def job_keys(self) -> Iterator[str]:
        """Yield the jid of every job hash (or the restricted jids that still exist)."""
        if self.only_jids is not None:
            yield from sorted(self.only_jids)
            return
        for key in self.scan("j:*", "hash"):
            yield self.name(key)[2:]

    def reads(self) -> Reads:
        """Return a new batch of reads."""
        return Reads(self.r, self.ks.engine_keys)

    def read_jobs(self, jids: list[str], fields: tuple[str, ...] = FIELDS
                  ) -> dict[str, dict[str, str] | None]:
        """HMGET the given fields of many jobs in one round trip (None: no job hash)."""
        pipe = self.reads()
        for jid in jids:
            pipe.hmget(self.key(f"j:{jid}"), list(fields))
        out: dict[str, dict[str, str] | None] = {}
        for jid, values in zip(jids, pipe.execute(), strict=True):
            got = {f: v for f, v in zip(fields, values, strict=True) if v is not None}
            out[jid] = got or None
        return out


def _glob_match(pattern: str, key: str) -> bool:
    """Match the simple `prefix*suffix` patterns the auditor uses."""
    prefix, _, suffix = pattern.partition("*")
    return key.startswith(prefix) and key.endswith(suffix) and len(key) >= len(prefix + suffix)


def _subject_keys(violations: list[Violation], ks: Keyspace
                  ) -> tuple[set[str], set[str]]:
    """Split violation subjects into jids and key names for the re-check pass."""
    jids: set[str] = set()
    keys: set[str] = set()
    for v in violations:
        if v.subject.startswith(ks.key("config ")):
            keys.add(v.subject)
        elif v.subject.startswith(ks.prefix):
            keys.add(v.subject.split(" ", 1)[0])
        else:
            jids.add(v.subject)
    return jids, keys


def collect(r: redis.Redis, ks: Keyspace = DEFAULT, recheck: bool = True
            ) -> tuple[list[Violation], int, int]:
    """Audit once, then re-check what was found; return (violations, jobs, keys)."""
    first = Auditor(r, ks)
    found = first.run()
    if found and recheck:
        jids, keys = _subject_keys(found, ks)
        again = Auditor(r, ks, only_jids=jids, only_keys=keys)
        confirmed = {(v.invariant, v.subject, v.detail) for v in again.run()}
        found = [v for v in found if (v.invariant, v.subject, v.detail) in confirmed]
    found.sort(key=lambda v: (v.invariant, v.subject, v.detail))
    return found, first.jobs, first.keys


def audit(client_or_redis: Any, *, fix: bool = False, recheck: bool = True) -> AuditReport:
    """Check every invariant of one keyspace (a Client's: the default or a shard; a
    redis.Redis: the default); with fix=True repair what is safe and audit again."""
    r, ks = target(client_or_redis)
    violations, jobs, keys = collect(r, ks, recheck)
    report = AuditReport(violations=violations, jobs=jobs, keys=keys, shard=ks.tag)
    if fix and violations:
        from .fix import repair

        report.fixed = repair(r, violations, ks)
        report.violations, report.jobs, report.keys = collect(r, ks, recheck)
    return report


def audit_all(deployment: QlessClient, *, fix: bool = False, recheck: bool = True
              ) -> list[AuditReport]:
    """Audit every keyspace of a deployment (`clients()`: a Client, or every shard of a
    ShardedClient), one after the other; return one report per keyspace."""
    return [audit(client, fix=fix, recheck=recheck) for client in deployment.clients()]


def is_inf(score: Any) -> bool:
    """Tell whether a zset score is +inf."""
    return isinstance(score, float) and math.isinf(score) and score > 0

