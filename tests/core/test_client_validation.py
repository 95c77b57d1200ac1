"""Bad arguments are refused in Python, before any round trip, with clear messages."""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_qless.core import Client, InvalidArgument, LimitExceeded
from django_qless.core.serialization import dumps, dumps_data


def evalsha_calls(r: redis.Redis) -> int:
    """Return how many EVALSHA commands the server ran so far."""
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    client = Client(redis_url, worker_name="w1", _clock=lambda: 1000.0)
    yield client
    client.close()


@pytest.fixture
def running(client: Client) -> Any:
    """A job popped by w1."""
    client.queues["q"].put("K", {"a": 1}, jid="run")
    return client.queues["q"].pop()


def nested(depth: int) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for _ in range(depth):
        data = {"x": data}
    return data


CASES: list[tuple[str, Callable[[Client], object], type[Exception], str]] = [
    ("priority text", lambda c: c.queues["q"].put("K", {}, priority="high"), InvalidArgument,
     "priority must be an integer, got 'high'"),
    ("priority float", lambda c: c.queues["q"].put("K", {}, priority=1.5), InvalidArgument,
     "priority must be an integer, got 1.5"),
    ("priority bool", lambda c: c.queues["q"].put("K", {}, priority=True), InvalidArgument,
     "priority must be an integer, got True"),
    ("priority hex", lambda c: c.queues["q"].put("K", {}, priority="0x10"), InvalidArgument,
     "priority must be an integer, got '0x10'"),
    ("priority range", lambda c: c.queues["q"].put("K", {}, priority=2**31), InvalidArgument,
     "priority must be an integer in [-2147483648, 2147483647], got 2147483648"),
    ("delay negative", lambda c: c.queues["q"].put("K", {}, delay=-5), InvalidArgument,
     "delay must be >= 0, got -5"),
    ("delay inf", lambda c: c.queues["q"].put("K", {}, delay=float("inf")), InvalidArgument,
     "delay must be finite, got inf"),
    ("delay nan text", lambda c: c.queues["q"].put("K", {}, delay="nan"), InvalidArgument,
     "delay must be a number, got 'nan'"),
    ("delay huge", lambda c: c.queues["q"].put("K", {}, delay=1e12), InvalidArgument,
     "delay must be at most 315360000,"),
    ("retries", lambda c: c.queues["q"].put("K", {}, retries=-1), InvalidArgument,
     "retries must be an integer in [0, 1000], got -1"),
    ("data list", lambda c: c.queues["q"].put("K", [1]), InvalidArgument,  # type: ignore[arg-type]
     "data must be a JSON object (dict), got list"),
    ("data decimal", lambda c: c.queues["q"].put("K", {"price": decimal.Decimal("1.5")}),
     InvalidArgument, "data['price'] is not JSON-serialisable: Decimal"),
    ("data nan", lambda c: c.queues["q"].put("K", {"a": [float("nan")]}), InvalidArgument,
     "data['a'][0] must be a finite number"),
    ("data int key", lambda c: c.queues["q"].put("K", {1: "x"}), InvalidArgument,
     "data has a non-string key 1"),
    ("data deep", lambda c: c.queues["q"].put("K", nested(70)), LimitExceeded,
     "nested deeper than 64"),
    ("data big", lambda c: c.queues["q"].put("K", {"s": "x" * (1024 * 1024)}), LimitExceeded,
     "data is 1,048,584 bytes, 8 over the limit of 1,048,576 bytes (1 MiB)"),
    ("put_many item", lambda c: c.queues["q"].put_many([{"klass": "K", "data": {}},
                                                        {"klass": "K", "data": {}, "delay": -1}]),
     InvalidArgument, "put_many item 1: delay must be >= 0, got -1"),
    ("jid empty", lambda c: c.queues["q"].put("K", {}, jid=""), InvalidArgument,
     "jid must be a non-empty string"),
    ("jid colon", lambda c: c.queues["q"].put("K", {}, jid="a:b"), InvalidArgument,
     "jid may only contain"),
    ("jid long", lambda c: c.queues["q"].put("K", {}, jid="a" * 65), InvalidArgument,
     "jid must be at most 64 characters"),
    ("jid suffix", lambda c: c.queues["q"].put("K", {}, jid="x-history"), InvalidArgument,
     "must not end in -history"),
    ("queue name", lambda c: c.queues["<script>"], InvalidArgument, "queue may only contain"),
    ("klass empty", lambda c: c.queues["q"].put("", {}), InvalidArgument,
     "klass must be a non-empty printable string"),
    ("tags string", lambda c: c.queues["q"].put("K", {}, tags="abc"), InvalidArgument,
     "tags must be a list of strings, got 'abc'"),
    ("tags many", lambda c: c.queues["q"].put("K", {}, tags=[f"t{i}" for i in range(51)]),
     LimitExceeded, "tags has 51 items, at most 50"),
    ("tag long", lambda c: c.queues["q"].put("K", {}, tags=["x" * 65]), InvalidArgument,
     "tags item must be at most 64 bytes"),
    ("depends self", lambda c: c.queues["q"].put("K", {}, jid="a", depends=["a"]),
     InvalidArgument, "depends must not contain the job itself: 'a'"),
    ("depends many", lambda c: c.queues["q"].put("K", {}, depends=[f"j{i}" for i in range(1001)]),
     LimitExceeded, "depends has 1001 items, at most 1000"),
    ("throttles many", lambda c: c.queues["q"].put("K", {}, throttles=[f"t{i}" for i in range(11)]),
     LimitExceeded, "throttles has 11 items, at most 10"),
    ("pop count 0", lambda c: c.queues["q"].pop(0), InvalidArgument,
     "count must be an integer in [1, 1000], got 0"),
    ("pop count big", lambda c: c.queues["q"].pop(1001), InvalidArgument,
     "count must be an integer in [1, 1000], got 1001"),
    ("peek count", lambda c: c.queues["q"].peek(501), InvalidArgument,
     "count must be an integer in [0, 500], got 501"),
    ("peek offset", lambda c: c.queues["q"].peek(1, offset=-1), InvalidArgument,
     "offset must be an integer >= 0, got -1"),
    ("jobs count", lambda c: c.queues["q"].jobs.waiting(count=10_000), InvalidArgument,
     "count must be an integer in [0, 500]"),
    ("recur interval 0", lambda c: c.queues["q"].recur("K", {}, 0), InvalidArgument,
     "interval must be >= 1, got 0"),
    ("recur interval nan", lambda c: c.queues["q"].recur("K", {}, float("nan")),
     InvalidArgument, "interval must be finite, got nan"),
    ("recur backlog", lambda c: c.queues["q"].recur("K", {}, 60, backlog=-1), InvalidArgument,
     "backlog must be an integer >= 0, got -1"),
    ("recur jid", lambda c: c.queues["q"].recur("K", {}, 60, jid="r" * 49), InvalidArgument,
     "at most 48 characters"),
    ("reserve queues", lambda c: c.reserve([f"q{i}" for i in range(101)]), InvalidArgument,
     "queues must name 1 to 100 queues, got 101"),
    ("reserve worker", lambda c: c.reserve(["q"], worker="a b"), InvalidArgument,
     "worker must be 1-128 printable ASCII characters"),
    ("config heartbeat", lambda c: c.config.__setitem__("heartbeat", 0), InvalidArgument,
     "config heartbeat must be an integer from 1 to 604800 (seconds), got 0"),
    ("config heartbeat bound", lambda c: c.config.__setitem__("heartbeat", 99999999999),
     InvalidArgument,
     "config heartbeat must be an integer from 1 to 604800 (seconds), got 99999999999"),
    ("config concurrency bound", lambda c: c.config.__setitem__("q-max-concurrency", 10**6 + 1),
     InvalidArgument, "config q-max-concurrency must be an integer from 0 to 1000000, got"),
    ("config history", lambda c: c.config.__setitem__("max-job-history", 2), InvalidArgument,
     "config max-job-history must be 0 (unlimited) or an integer from 3 to 10000, got 2"),
    ("config queue heartbeat", lambda c: c.config.__setitem__("q-heartbeat", "x"),
     InvalidArgument, "config q-heartbeat must be an integer, got 'x'"),
    ("throttle max", lambda c: c.throttles["t"].set(-1), InvalidArgument,
     "maximum must be an integer >= 0, got -1"),
    ("put_many bad item", lambda c: c.queues["q"].put_many(
        [{"klass": "K", "data": {}}, {"klass": "K", "data": {}, "priority": "x"}]),
     InvalidArgument, "priority must be an integer, got 'x'"),
    ("put_many unknown key", lambda c: c.queues["q"].put_many([{"klass": "K", "data": {},
                                                                "color": 1}]),
     InvalidArgument, "put_many item 0 needs klass and data"),
    ("worker name", lambda c: Client(c.redis, worker_name="a:b"), InvalidArgument,
     "worker must be 1-128 printable ASCII characters without space or ':', got 'a:b'"),
]


@pytest.mark.parametrize(("name", "call", "cls", "text"), CASES, ids=[c[0] for c in CASES])
def test_refused_before_any_round_trip(
    client: Client, r: redis.Redis, name: str, call: Callable[[Client], object],
    cls: type[Exception], text: str,
) -> None:
    client.channel.load_script()
    before = evalsha_calls(r)
    with pytest.raises(cls) as caught:
        call(client)
    assert text in str(caught.value)
    assert evalsha_calls(r) == before
    assert r.dbsize() == 0


def test_job_method_arguments_are_checked(client: Client, running: Any, r: redis.Redis) -> None:
    before = evalsha_calls(r)
    with pytest.raises(InvalidArgument, match="delay and depends need next"):
        running.complete(delay=5)
    with pytest.raises(InvalidArgument, match="queue may only contain"):
        running.complete("bad queue")
    with pytest.raises(InvalidArgument, match="group must be a non-empty printable string"):
        running.fail("", "boom")
    with pytest.raises(InvalidArgument, match="delay must be >= 0"):
        running.retry(delay=-1)
    with pytest.raises(InvalidArgument, match="priority must be an integer"):
        running.set_priority("x")
    with pytest.raises(InvalidArgument, match="undepend needs at least one jid"):
        running.undepend()
    assert evalsha_calls(r) == before
    assert client.jobs["run"].state == "running"


def test_dumps_is_compact_and_keeps_unicode() -> None:
    assert dumps({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'
    assert dumps_data({"when": 1.5}) == '{"when":1.5}'
    with pytest.raises(InvalidArgument, match=r"value\['x'\] is not JSON-serialisable: set"):
        dumps({"x": {1}})


def test_numbers_accept_plain_decimal_text(client: Client) -> None:
    jid = client.queues["q"].put("K", {}, priority="7", delay="0", retries="3")
    job = client.jobs[jid]
    assert (job.priority, job.original_retries) == (7, 3)


def test_lone_surrogates_are_refused(client: Client, r: redis.Redis) -> None:
    before = evalsha_calls(r)
    with pytest.raises(InvalidArgument, match="not valid UTF-8"):
        client.queues["q"].put("K", {"s": "\ud800"})
    with pytest.raises(InvalidArgument, match="not valid UTF-8"):
        client.call("log", "j", "\ud800")
    with pytest.raises(InvalidArgument, match="not valid UTF-8"):
        client.pipeline_calls([("log", ["j", "\ud800"])])
    assert evalsha_calls(r) == before


@pytest.mark.parametrize("make", ["new_jid", "new_jids"])
def test_new_jid_is_a_random_uuid4_hex(make: str) -> None:
    import uuid

    from django_qless.core.serialization import check_jid, new_jid, new_jids

    made = [new_jid() for _ in range(1000)] if make == "new_jid" else new_jids(1000)
    jids = set(made)
    assert len(jids) == 1000 and new_jids(0) == [] and len(new_jids(1)) == 1
    for jid in jids:
        parsed = uuid.UUID(hex=jid)
        assert parsed.hex == jid and parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert check_jid(jid) == jid
