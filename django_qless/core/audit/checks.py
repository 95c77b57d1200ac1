"""The auditor's checks: job pass, index pass, dependency edges, tags, queue bookkeeping.

Subjects: a bare jid for job-pass findings; `<key> <member>` for an index entry; a key name
for a whole key. The re-check pass and the repairs parse them back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..throttle import queue_throttle_id
from .auditor import (
    BATCH,
    JOB_BATCH,
    QUEUE_KINDS,
    STATE_INDEX,
    STATES,
    chunks,
    failure_group,
    is_inf,
    json_list,
    num,
)

if TYPE_CHECKING:
    from .auditor import Auditor

__all__ = ["check_dependencies", "check_indexes", "check_jobs", "check_misc", "check_tags"]

# index kind -> states a member of it may have
KIND_STATES = {"work": ("waiting", "stalled"), "locks": ("running",),
               "scheduled": ("scheduled",), "depends": ("depends",),
               "throttled": ("throttled",)}


def job_tids(queue: str, throttles: str | None) -> list[str]:
    """Return the throttle ids that may hold a throttled job pending (a queue's own throttle
    id is the same in every keyspace: an id, not a key)."""
    return [queue_throttle_id(queue), *json_list(throttles)]


def members(a: Auditor, key: str, kind: str) -> Iterator[list[str]]:
    """Yield the members of an index key in batches (zset, set or list)."""
    if kind == "zset":
        # Pages by rank: members shift on a live system, so an entry may be seen twice or
        # missed for one run; the re-check pass and the next audit cover both.
        start = 0
        while True:
            page = [str(m) for m in a.r.zrange(key, start, start + BATCH - 1)]
            if page:
                yield page
            if len(page) < BATCH:
                return
            start += BATCH
    elif kind == "set":
        yield from chunks(str(m) for m in a.r.sscan_iter(key, count=BATCH))
    else:
        start = 0
        while True:
            got = a.r.lrange(key, start, start + BATCH - 1)
            if got:
                yield [str(m) for m in got]
            if len(got) < BATCH:
                return
            start += BATCH


# ------------------------------------------------------------------------- job pass

def check_jobs(a: Auditor) -> None:
    """Each job hash: one known state, in exactly the index it implies, sane fields."""
    for batch in chunks(a.job_keys(), JOB_BATCH):
        jobs = a.read_jobs(batch)
        pipe = a.reads()
        plans: list[tuple[str, dict[str, str], list[tuple[str, str]]]] = []
        for jid, h in jobs.items():
            if h is None:
                continue
            a.jobs += 1
            state, queue = h.get("state", ""), h.get("queue", "")
            if state not in STATES:
                a.add("state.unknown", jid, f"state is {state!r}", fixable=False)
                continue
            probes: list[tuple[str, str]] = []

            def probe(label: str, key: str, probes: list[tuple[str, str]] = probes) -> None:
                probes.append((label, key))

            if queue:
                for kind in QUEUE_KINDS:
                    probe(kind, a.key(f"q:{queue}-{kind}"))
                if state == "waiting":  # (or set aside for its rate limit's window)
                    probe("ratelimited", a.key(f"q:{queue}-ratelimited"))
            worker = h.get("worker", "")
            if state == "running" and worker:
                probe("wset", a.key(f"w:{worker}:jobs"))
            group = failure_group(h.get("failure"))
            if state == "failed" and group:
                probe("fpos", a.key(f"f:{group}"))
            if state == "complete":
                probe("completed", a.key("completed"))
            probe("deps", a.key(f"j:{jid}-dependencies"))
            for tag in json_list(h.get("tags")):
                probe("tag", a.key(f"t:{tag}"))
            probe("tracked", a.key("tracked"))
            for tid in json_list(h.get("held")):
                probe("held", a.key(f"th:{tid}-locks"))
            if state == "throttled" and queue:
                for tid in job_tids(queue, h.get("throttles")):
                    probe("pending", a.key(f"th:{tid}-pending"))
            for label, key in probes:
                if label == "fpos":
                    pipe.lpos(key, jid, count=2)
                elif label == "deps":
                    pipe.scard(key)
                else:
                    pipe.zscore(key, jid)
            plans.append((jid, h, probes))
        results = iter(pipe.execute())
        for jid, h, probes in plans:
            got = [(label, key, next(results)) for label, key in probes]
            judge_job(a, jid, h, got)


def judge_job(a: Auditor, jid: str, h: dict[str, str], got: list[tuple[str, str, Any]]) -> None:
    """Apply the per-job rules to one job and its probe results."""
    state, queue, worker = h["state"], h.get("queue", ""), h.get("worker", "")
    res = {label: value for label, _, value in got if label in (*QUEUE_KINDS, "wset", "fpos",
                                                                 "completed", "deps", "tracked",
                                                                 "ratelimited")}
    expected = STATE_INDEX.get(state)
    if state == "waiting" and res.get("ratelimited") is not None and res.get("work") is None:
        expected = None  # set aside until its rate limit's window opens (ratelimit.lua)
    if expected and not queue:
        a.add("index.missing", jid, f"state {state} but no queue", fixable=False)
    if queue:
        for kind in QUEUE_KINDS:
            inside = res.get(kind) is not None
            index = a.key(f"q:{queue}-{kind}")
            if kind == expected and not inside:
                a.add("index.missing", jid, f"state {state} but not in {index}")
            elif kind != expected and inside:
                a.add("index.extra", jid, f"state {state} but also in {index}")
        score = res.get("work")
        if state == "stalled" and score is not None and not is_inf(score):
            a.add("stalled.score", jid, f"stalled but work score is {score}, not +inf")
        if state == "waiting" and is_inf(score):
            a.add("stalled.score", jid, "waiting but work score is +inf")
    if state == "running":
        expires = num(h.get("expires"))
        if not worker or expires is None or expires <= 0:
            a.add("running.lease", jid,
                  f"running with worker {worker!r} and expires {h.get('expires')!r}")
        elif h.get("grace") != "1" and res.get("wset") is None:
            # During the grace period the engine has already dropped the owner's entry.
            a.add("index.missing", jid, f"running but not in {a.key(f'w:{worker}:jobs')}")
    elif worker:
        a.add("worker.stale", jid, f"state {state} but worker field is {worker!r}")
    if state == "failed":
        group = failure_group(h.get("failure"))
        positions = res.get("fpos") or []
        if group is None:
            a.add("index.missing", jid, "failed without a failure group", fixable=False)
        elif not positions:
            a.add("index.missing", jid, f"failed but not in {a.key(f'f:{group}')}")
        elif len(positions) > 1:
            a.add("failed.duplicate", jid, f"listed more than once in {a.key(f'f:{group}')}")
    if state == "complete" and res.get("completed") is None:
        a.add("index.missing", jid, f"complete but not in {a.key('completed')}")
    ndeps = int(res.get("deps") or 0)
    if state == "depends" and ndeps == 0:
        a.add("deps.state", jid, "state depends but its dependency set is empty")
    elif state != "depends" and ndeps > 0:
        a.add("deps.state", jid, f"state {state} but has {ndeps} dependencies")
    retries, remaining = num(h.get("retries")), num(h.get("remaining"))
    if h.get("remaining") is None:
        remaining = retries  # a lean record leaves `remaining` out while it equals `retries`
    if retries is None or remaining is None or remaining > retries or remaining < -1:
        a.add("retries.range", jid,
              f"retries {h.get('retries')!r}, remaining {h.get('remaining')!r}", fixable=False)
    for label, key, value in got:
        if label == "tag" and value is None:
            a.add("tags.index", jid, f"carries tag {a.name(key)[2:]!r} but is not in {key}")
        if label == "held":
            if state != "running":
                a.add("throttle.lock", jid, f"state {state} but holds {a.name(key)[3:-6]!r}")
            elif value is None:
                a.add("throttle.lock", jid,
                      f"running, holds {a.name(key)[3:-6]!r} but not in {key}")
    if state != "running" and not any(label == "held" for label, _, _ in got) and h.get("held"):
        a.add("throttle.lock", jid, f"state {state} but held field is {h.get('held')!r}")
    if state == "throttled" and not any(lb == "pending" and v is not None for lb, _, v in got):
        a.add("throttle.pending", jid, "throttled but in no throttle's pending set")
    if (h.get("tracked") == "1") != (res.get("tracked") is not None):
        a.add("tracked.mirror", jid, f"tracked field and {a.key('tracked')} disagree")


# ------------------------------------------------------------------------- index pass

def belongs(kind: str, owner: str, h: dict[str, str]) -> str | None:
    """Return why a job does not belong in an index of `kind` for `owner`, or None."""
    state = h.get("state", "")
    if kind in KIND_STATES:
        if state not in KIND_STATES[kind] or h.get("queue", "") != owner:
            return f"job is {state} in queue {h.get('queue', '')!r}"
    elif kind == "completed" and state != "complete":
        return f"job is {state}"
    elif kind == "failed" and (state != "failed" or failure_group(h.get("failure")) != owner):
        return f"job is {state} (group {failure_group(h.get('failure'))!r})"
    elif kind == "worker" and (state != "running" or h.get("worker", "") != owner):
        return f"job is {state} held by {h.get('worker', '')!r}"
    elif kind == "thlocks" and (state != "running" or owner not in json_list(h.get("held"))):
        return f"job is {state} holding {json_list(h.get('held'))}"
    elif kind == "thpending" and state != "throttled":
        return f"job is {state}"
    elif kind == "tag" and owner not in json_list(h.get("tags")):
        return "job does not carry the tag"
    return None


def check_index(a: Auditor, key: str, rtype: str, kind: str, owner: str) -> None:
    """Every member of one index exists and belongs there."""
    for batch in members(a, key, rtype):
        for jid, h in a.read_jobs(batch).items():
            if h is None:
                a.add("index.ghost", f"{key} {jid}", "entry has no job hash")
                continue
            if h.get("state") not in STATES:
                continue  # reported by the job pass; leave unknown states alone
            why = belongs(kind, owner, h)
            if why:
                invariant = {"tag": "tags.index", "thlocks": "throttle.lock",
                             "thpending": "throttle.pending"}.get(kind, "index.mismatch")
                a.add(invariant, f"{key} {jid}", why)


def check_indexes(a: Auditor) -> None:
    """Walk every index key: queue zsets, completed, failure lists, worker sets, throttles."""
    for key in a.scan("q:*", "zset"):
        queue, _, kind = a.name(key)[2:].rpartition("-")
        if kind in KIND_STATES:
            check_index(a, key, "zset", kind, queue)
        elif kind == "recur":
            check_recur_index(a, key, queue)
    for key in a.scan("completed", "zset"):
        check_index(a, key, "zset", "completed", "")
    groups: set[str] = set()
    for key in a.scan("f:*", "list"):
        groups.add(a.name(key)[2:])
        check_index(a, key, "list", "failed", a.name(key)[2:])
    check_failure_groups(a, groups)
    for key in a.scan("w:*:jobs", "zset"):
        check_index(a, key, "zset", "worker", a.name(key)[2:-5])
    for key in a.scan("th:*", "zset"):
        if key.endswith("-locks"):
            check_index(a, key, "zset", "thlocks", a.name(key)[3:-6])
        elif key.endswith("-pending"):
            check_index(a, key, "zset", "thpending", a.name(key)[3:-8])
    for key in a.scan("tracked", "zset"):
        for batch in members(a, key, "zset"):
            for jid, h in a.read_jobs(batch, ("state",)).items():
                if h is None:
                    a.add("index.ghost", f"{key} {jid}", "tracked jid has no job hash")


def check_failure_groups(a: Auditor, groups: set[str]) -> None:
    """`ql:failures` names exactly the groups whose `ql:f:<group>` list is non-empty."""
    failures = a.key("failures")
    if a.only_keys is not None:
        listed = {a.name(k)[2:] for k in a.only_keys if k.startswith(a.key("f:"))}
        known = {g for g in listed if a.r.sismember(failures, g)}
    else:
        known = set(a.r.sscan_iter(failures, count=BATCH))
        listed = known | groups
    for group in sorted(listed):
        present = a.r.llen(a.key(f"f:{group}")) > 0
        if present != (group in known):
            a.add("failures.set", a.key(f"f:{group}"),
                  f"list {'non-empty' if present else 'empty'} but "
                  f"{'not ' if group not in known else ''}in {failures}")


def check_recur_index(a: Auditor, key: str, queue: str) -> None:
    """Every recurring entry has its template, and the template names this queue."""
    for batch in members(a, key, "zset"):
        pipe = a.reads()
        for jid in batch:
            pipe.hget(a.key(f"r:{jid}"), "queue")
        for jid, owner in zip(batch, pipe.execute(), strict=True):
            if owner != queue:
                a.add("recur.index", f"{key} {jid}",
                      "no recurring template" if owner is None else f"template queue {owner!r}")


# ------------------------------------------------------------------------- dependencies

def check_dependencies(a: Auditor) -> None:
    """A depends on B exactly when B lists A as a dependent; both jobs exist."""
    for key in a.scan("j:*", "set"):
        if key.endswith("-dependencies"):
            owner, mirror = a.name(key)[2:-13], "dependents"
        elif key.endswith("-dependents"):
            owner, mirror = a.name(key)[2:-11], "dependencies"
        else:
            continue
        if a.r.exists(a.key(f"j:{owner}")) == 0:
            a.add("orphan.key", key, "dependency set of a job that does not exist")
        for batch in members(a, key, "set"):
            pipe = a.reads()
            for other in batch:
                pipe.exists(a.key(f"j:{other}"))
                pipe.sismember(a.key(f"j:{other}-{mirror}"), owner)
            replies = pipe.execute()
            for i, other in enumerate(batch):
                if not replies[2 * i]:
                    a.add("deps.ghost", f"{key} {other}", "edge to a job that does not exist")
                elif not replies[2 * i + 1]:
                    a.add("deps.symmetry", f"{key} {other}",
                          f"{a.key(f'j:{other}-{mirror}')} does not list {owner}")


# ------------------------------------------------------------------------- tags

def check_tags(a: Auditor) -> None:
    """Tag index entries point at jobs carrying the tag; `ql:tags` counts match."""
    tags: set[str] = set()
    counter = a.key("tags")
    for key in a.scan("t:*", "zset"):
        tags.add(a.name(key)[2:])
        check_index(a, key, "zset", "tag", a.name(key)[2:])
    if a.only_keys is not None:
        counted = {a.name(k)[2:]: a.r.zscore(counter, a.name(k)[2:]) for k in a.only_keys
                   if k.startswith(a.key("t:"))}
    else:
        counted = dict(a.r.zscan_iter(counter, count=BATCH))
    for tag in sorted(set(counted) | tags):
        card = a.r.zcard(a.key(f"t:{tag}"))
        count = counted.get(tag)
        if (count is None and card > 0) or (count is not None and int(count) != card):
            a.add("tags.counter", a.key(f"t:{tag}"),
                  f"{counter} says {count}, index holds {card}")


# ------------------------------------------------------------------------- misc keys

def check_misc(a: Auditor) -> None:
    """Recurring templates indexed; queue meta bounds honest; no orphan history lists."""
    for key in a.scan("r:*", "hash"):
        queue = str(a.r.hget(key, "queue") or "")
        index = a.key(f"q:{queue}-recur")
        if not queue or a.r.zscore(index, a.name(key)[2:]) is None:
            a.add("recur.index", key, f"template not in {index}")
    check_bookkeeping(a)
    for batch in chunks(a.scan("j:*-history", "list")):
        reads = a.reads()
        for key in batch:
            reads.exists(key[:-8])
        for key, found in zip(batch, reads.execute(), strict=True):
            if not found:
                a.add("orphan.key", key, "history of a job that does not exist")


def check_bookkeeping(a: Auditor) -> None:
    """The engine's hidden `ql:config` fields: `#due:<q>` is a lower bound of the queue's
    lock, schedule and spawn times; `#throttle:<q>` says whether the queue throttle exists."""
    config = a.key("config")
    if a.only_keys is not None:
        fields = [k.split(" ", 1)[1] for k in a.only_keys if k.startswith(config + " ")]
        values = a.r.hmget(config, fields) if fields else []
        items = [(f, str(v)) for f, v in zip(fields, values, strict=True) if v is not None]
    else:
        items = [(str(f), str(v)) for f, v in a.r.hscan_iter(config, match="#*",
                                                               count=BATCH)]
    for name, value in items:
        kind, _, queue = name[1:].partition(":")
        if kind == "due" and queue:
            due = num(value)
            first = math.inf
            for zkind in ("locks", "scheduled", "recur"):
                head = a.r.zrange(a.key(f"q:{queue}-{zkind}"), 0, 0, withscores=True)
                if head:
                    first = min(first, float(head[0][1]))
            if due is not None and due > first:
                a.add("queue.meta", f"{config} {name}",
                      f"bound {value} is later than the earliest timer {first}")
        elif kind == "throttle" and queue:
            exists = a.r.exists(a.key(f"th:{queue_throttle_id(queue)}")) == 1
            if (value == "1") != exists:
                state = "exists" if exists else "is gone"
                a.add("queue.meta", f"{config} {name}",
                      f"cached {value!r} but the queue throttle {state}")
