"""The worker's calls reply with a flat array; the Jobs built from it equal `get`'s.

reserve, reserve.wait and complete.reserve send each job's stored texts (objects.lua,
`Q.job_fields`); the client derives what the JSON job object would say
(core/hotpath.py). Every attribute of a Job received through them must equal the Job
`client.jobs[jid]` reads, whatever the job carries (docs/engine.md, "The worker's replies").
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import redis

from django_qless.core import Client
from django_qless.core.engine.lua import function_name, library_text, script_text
from django_qless.core.exceptions import QlessError
from django_qless.core.hotpath import REPLY_SHAPE, decode_worker_reply
from django_qless.core.job import Job
from tests.core import keyspace_mode
from tests.core.conftest import FakeClock

__all__: list[str] = []

ODD_DATA = {
    "text": 'h\u00e9llo \u2603 "quoted" \\ / \u2028 \U0001f600 \x01',
    "big": 12345678901234567890,
    "float": 0.1 + 0.2,
    "tiny": 1e-300,
    "empty_object": {},
    "empty_list": [],
    "nested": [{"a": []}, [{}], None, True],
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_790_000_000.123456)


def decoded(job: Job) -> Any:
    """The job's data, or the error decoding it raises (the same for both Jobs)."""
    try:
        return job.data
    except ValueError as exc:
        return repr(exc)


def attributes(job: Job) -> dict[str, Any]:
    """Every attribute a Job exposes (history and dependency lists load on first use)."""
    return {
        "jid": job.jid, "klass": job.klass_name, "queue": job.queue_name,
        "raw_data": job.raw_data, "data": decoded(job), "priority": job.priority,
        "tags": job.tags, "state": job.state, "worker": job.worker_name,
        "expires": job.expires_at, "retries": job.retries,
        "original_retries": job.original_retries, "failure": job.failure,
        "tracked": job.tracked, "throttles": job.throttles, "spawned_from": job.spawned_from,
        "history": job.history, "dependencies": job.dependencies,
        "dependents": job.dependents,
    }


def same_as_get(client: Client, jobs: list[Job]) -> None:
    """Each job's attributes equal those of the Job `get` returns for its jid."""
    assert jobs
    for job in jobs:
        stored = client.jobs[job.jid]
        assert stored is not None
        assert attributes(job) == attributes(stored)


def test_reserve_reply_equals_get(client: Client, clock: FakeClock) -> None:
    """Tags, priorities, odd data, tracked, throttles, dependents: reserve gives get's Job."""
    q = client.queues["q"]
    client.throttles["t1"].set(5)
    q.put("K", ODD_DATA, jid="odd", tags=["t\u00fcg", 'a"b', "x/y"], priority=-7)
    q.put("K", {}, jid="high", priority=2147483647, retries=0)
    q.put("app.Jobs.K\u00e9", {"n": 1}, jid="thr", throttles=["t1"], retries=9)
    q.put("K", {}, jid="child", depends=["high"])
    client.jobs["odd"].track()  # type: ignore[union-attr]
    clock.advance(0.000123)
    jobs, wake = client.reserve(["q"], count=5)
    assert wake is None
    assert {j.jid for j in jobs} == {"odd", "high", "thr"}
    same_as_get(client, jobs)
    by_jid = {j.jid: j for j in jobs}
    assert by_jid["high"].dependents == ["child"]
    assert by_jid["odd"].tracked and by_jid["odd"].priority == -7
    assert by_jid["thr"].throttles == ("t1",)
    # complete.reserve: the dependent, released by the completion, comes in the same call
    state, more, wake = client.complete_and_reserve(by_jid["high"], ["q"], count=2)
    assert state == "complete" and [j.jid for j in more] == ["child"] and wake is None
    same_as_get(client, more)


def test_deferred_complete_and_reserve_equals_get(client: Client, clock: FakeClock) -> None:
    """The worker's overlapped call (sent now, read later) decodes the same way."""
    q = client.queues["q"]
    q.put("K", {"a": 1}, jid="a", tags=["one"], priority=3)
    q.put("K", ODD_DATA, jid="b", tags=["two", "three"])
    (first,), _ = client.reserve(["q"])
    pending = client.send_complete_and_reserve(first, ["q"])
    state, jobs, _ = pending.result()
    assert state == "complete" and [j.jid for j in jobs] == ["b"]
    same_as_get(client, jobs)


def test_retried_job_equals_get(client: Client, clock: FakeClock) -> None:
    """A job whose lease ran out comes back with a retry spent (a number in the engine)."""
    q = client.queues["q"]
    q.put("K", {}, jid="a", retries=3)
    (job,), _ = client.reserve(["q"], worker="gone")
    clock.advance(61)  # the lease (60 s) ran out: the next pop sends the courtesy notice
    assert client.reserve(["q"])[0] == []
    clock.advance(11)  # and after the grace period (10 s) it hands the job out again
    jobs, _ = client.reserve(["q"])
    assert [j.jid for j in jobs] == ["a"] and jobs[0].retries == 2
    same_as_get(client, jobs)


def test_failed_and_retried_job_equals_get(client: Client, clock: FakeClock) -> None:
    """A job retried after an error carries what the engine recorded of it."""
    q = client.queues["q"]
    q.put("K", {}, jid="a", retries=3)
    (job,), _ = client.reserve(["q"])
    job.retry(group="boom", message="it broke \u2603")
    clock.advance(1)
    jobs, _ = client.reserve(["q"])
    assert [j.jid for j in jobs] == ["a"]
    same_as_get(client, jobs)


def test_spawned_job_equals_get(client: Client, clock: FakeClock) -> None:
    """A recurring job's child names its parent."""
    client.queues["q"].recur("K", {"r": 1}, 60, jid="parent", tags=["rec"])
    jobs, _ = client.reserve(["q"])
    assert jobs and jobs[0].spawned_from == "parent"
    same_as_get(client, jobs)


def test_reserve_wait_reply_equals_get(client: Client, clock: FakeClock) -> None:
    """reserve.wait replies as reserve does when a job is ready."""
    client.queues["q"].put("K", ODD_DATA, jid="a", tags=["w"], priority=4)
    jobs, wake = client.reserve(["q"], wait=30)
    assert [j.jid for j in jobs] == ["a"] and wake is None
    same_as_get(client, jobs)
    # The lock of `a` is the next thing due: now + 60, rounded down to 1/8 s.
    assert jobs[0].expires_at == 1_790_000_060.0
    assert client.reserve(["q"], wait=30) == ([], pytest.approx(1_790_000_060.0 - clock.t))


def test_replayed_complete_reserve_equals_get(client: Client, clock: FakeClock) -> None:
    """A complete.reserve repeated after a lost reply sends the jobs the first one reserved."""
    q = client.queues["q"]
    q.put("K", {}, jid="a")
    q.put("K", ODD_DATA, jid="b", tags=["r"], priority=-1)
    (job,), _ = client.reserve(["q"])
    args = ("complete.reserve", job.jid, "w1", "q", "{}", job.attempt_token, 1, "q")
    first = decode_worker_reply(client.call(*args))
    again = decode_worker_reply(client.call(*args))
    assert again == first and [j["jid"] for j in again["jobs"]] == ["b"]
    jobs = [Job(client, d, owner="w1") for d in again["jobs"]]
    same_as_get(client, jobs)


# Stored texts other writers (or a restore) may leave in a job hash, and how the engine's own
# reading of them must be mirrored: each is written over a waiting job, then reserved.
ODD_FIELDS = [
    ("priority", "1e3"), ("priority", " 12 "), ("priority", "0x10"), ("priority", "-0"),
    ("priority", "12345678901234567"), ("priority", "garbage"), ("priority", "1_0"),
    ("priority", "3.75"), ("priority", ""), ("priority", "7\x00x"),
    ("retries", "12345678901234567"), ("retries", "2.5"), ("retries", "x"),
    ("remaining", "4.9"), ("remaining", ""), ("remaining", "nope"), ("remaining", "-3"),
    ("tags", '["x", 1.5, 123456789012345678, [], {}]'), ("tags", '{"k": "v"}'),
    ("tags", '"text"'), ("tags", "not json"), ("tags", '["\\u00e9", "\\/"]'),
    ("tags", '["lone \\ud800"]'), ("tags", "[]"), ("tags", ""), ("tags", '["a\nb"]'),
    ("failure", '{"group": "g", "when": 1790000000.123456789, "x": [], "y": [1, {}]}'),
    ("failure", "[1, 2]"), ("failure", "[]"), ("failure", "{}"), ("failure", "bad"),
    ("spawned_from_jid", ""), ("klass", "K\u00e9\u2603"),
    ("data", '{"a": "\u00e9", "b": 1e400}'),
    # (a field holding the separator of a job's fields: that job comes as an array)
    ("data", '{"a": "x\x1fy"}'), ("klass", "K\x1fK"), ("tags", '["a\x1fb"]'),
]


@pytest.mark.parametrize(("field", "text"), ODD_FIELDS, ids=[f"{f}={t!r}" for f, t in ODD_FIELDS])
def test_odd_stored_texts_read_as_get_reads_them(
    client: Client, r: redis.Redis, field: str, text: str
) -> None:
    """Whatever a field holds, the reserved Job reads it as the Job from `get` does."""
    client.queues["q"].put("K", {}, jid="a", retries=5, tags=["t"])
    r.hset("ql:j:a", field, text)
    jobs, _ = client.reserve(["q"])
    assert [j.jid for j in jobs] == ["a"]
    same_as_get(client, jobs)


def test_unprintable_number_fails_clearly(client: Client, r: redis.Redis) -> None:
    """A number cjson cannot print fails the reserve with an error, as `get` fails."""
    client.queues["q"].put("K", {}, jid="a")
    r.hset("ql:j:a", "priority", "inf")
    with pytest.raises(QlessError):
        client.reserve(["q"])
    with pytest.raises(QlessError):
        client.jobs["a"]  # noqa: B018 - the read is the test


# -- the reply's shape is bound to the engine's text -------------------------------------------


def test_reply_of_another_shape_is_refused() -> None:
    """A reply this client does not know the shape of is refused, never guessed at."""
    for reply in ('{"jobs": [], "wake": -1}', ["qless-flat-0", "", "-1", "w"],
                  [REPLY_SHAPE, "", "", "w", "a\x1fb"], [REPLY_SHAPE, "", "", "w", ["a"]], None):
        with pytest.raises(QlessError, match="shape|malformed"):
            decode_worker_reply(reply)


@pytest.mark.skipif(keyspace_mode.KEYSPACE is not None, reason="loads a library by hand")
def test_engine_of_another_version_is_never_called(client: Client, r: redis.Redis) -> None:
    """Engines of two versions live side by side (the function name is the text's sha): the
    other version's reply is refused by this client, and this client still calls its own."""
    if int(str(r.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("functions need Redis 7")
    shape = f"'{REPLY_SHAPE}'"
    other_script = script_text(True).replace(shape, "'qless-flat-0'")
    # (named as core/engine/lua.py names every engine: by its text's sha)
    name = "djqless_" + hashlib.sha1(other_script.encode()).hexdigest()[:16]  # noqa: S324
    assert name != function_name(True)
    ours = function_name(True)
    r.function_load(library_text(True).replace(shape, "'qless-flat-0'").replace(ours, name))
    client.queues["q"].put("K", {}, jid="a", priority=1)
    client.queues["q"].put("K", ODD_DATA, jid="b", tags=["t"])
    foreign = r.fcall(name, 0, "reserve", repr(client.now()), "w1", "1", "q")
    with pytest.raises(QlessError, match="shape"):
        decode_worker_reply(foreign)
    jobs, _ = client.reserve(["q"])
    assert [j.jid for j in jobs] == ["b"]
    same_as_get(client, jobs)
