"""The script call path: NOSCRIPT reload, no retries, fork safety, worker names, the clock."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis

from django_qless.core import Client, QlessConnectionError, QlessError, ServerClock
from django_qless.core.engine.lua import function_name

# A script that keeps the server busy for ARGV[1] seconds (Redis reads no socket meanwhile).
# Valkey 8 freezes TIME for the length of a script, so it measures with os.clock (CPU time,
# which a busy loop spends), which Valkey offers and Redis does not.
BUSY = """
local has_clock, clock = pcall(function() return os.clock end)
local function now()
  if has_clock then return clock() end
  local t = redis.call('TIME')
  return t[1] + t[2] / 1e6
end
local start = now()
while now() - start <= tonumber(ARGV[1]) do end
return 1
"""


def calls(r: redis.Redis, command: str) -> int:
    """Return how many times the server ran a command so far."""
    stats = r.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def popped_count(client: Client, jids: Sequence[str]) -> int:
    """Count `popped` history entries over jobs (a ledger of dispatches)."""
    return sum(
        1 for jid in jids for entry in client.jobs[jid].history if entry["what"] == "popped"
    )


@pytest.fixture
def make_client(redis_url: str) -> Iterator[Callable[..., Client]]:
    """Build clients (default: the test database, worker w1) and close them afterwards."""
    made: list[Client] = []

    def make(target: Any = None, cls: type[Client] = Client, **kwargs: Any) -> Client:
        kwargs.setdefault("worker_name", "w1")
        made.append(cls(redis_url if target is None else target, **kwargs))
        return made[-1]

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., Client]) -> Client:
    return make_client()


def test_pool_decodes_and_never_retries(client: Client) -> None:
    kwargs = client.redis.connection_pool.connection_kwargs
    assert kwargs["decode_responses"] is True
    assert kwargs["retry"].get_retries() == 0
    assert client.call("length", "q") == 0


def test_wraps_a_caller_redis_without_decoding(
    r: redis.Redis, redis_url: str, make_client: Callable[..., Client]
) -> None:
    raw = redis.Redis.from_url(redis_url)
    client = make_client(raw)
    assert client.redis is not raw
    jid = client.queues["q"].put("K", {"a": "é"})
    assert client.jobs[jid].data == {"a": "é"}
    shared = make_client(r)
    assert shared.redis is r
    raw.close()


def test_noscript_reload_after_script_flush(
    make_client: Callable[..., Client], r: redis.Redis
) -> None:
    client = make_client(engine="script")
    q = client.queues["q"]
    q.put("K", {}, jid="a")
    put_sha = client.channel.invoker.command(("put", "0"))[1]  # put's own script (bundle)
    r.script_flush()
    assert r.script_exists(put_sha) == [False]
    q.put("K", {}, jid="b")
    assert r.script_exists(put_sha) == [True]
    assert q.jobs.waiting() == ["a", "b"]
    # put_many loads the script once, then calls it.
    r.script_flush()
    before = calls(r, "script|load") + calls(r, "script")
    jids = q.put_many([{"klass": "K", "data": {"i": i}} for i in range(3)])
    assert calls(r, "script|load") + calls(r, "script") == before + 1
    assert q.jobs.waiting(count=10) == ["a", "b", *jids]


@pytest.fixture
def redis7(redis_version_info: tuple[int, ...]) -> None:
    """Skip on servers without functions (Redis < 7)."""
    if redis_version_info < (7,):
        pytest.skip("Redis functions need Redis 7")


@pytest.mark.usefixtures("redis7")
def test_function_reload_after_function_flush(
    make_client: Callable[..., Client], r: redis.Redis
) -> None:
    client = make_client(engine="auto")
    q = client.queues["q"]
    q.put("K", {}, jid="a")
    assert client.engine_mode in ("auto", "function")
    assert r.function_list(library=function_name())
    r.function_flush()
    evalsha = calls(r, "evalsha")
    q.put("K", {}, jid="b")
    assert client.engine_mode == "function"
    assert r.function_list(library=function_name())
    assert calls(r, "evalsha") == evalsha
    r.function_flush()
    jids = q.put_many([{"klass": "K", "data": {"i": i}} for i in range(3)])
    assert q.jobs.waiting(count=10) == ["a", "b", *jids]


def test_deferred_complete_reserve_after_the_engine_was_flushed(
    make_client: Callable[..., Client], r: redis.Redis
) -> None:
    """A completion sent ahead that finds the engine gone: reloaded, run once, same reply."""
    client = make_client()
    q = client.queues["q"]
    first, second = q.put("K", {}), q.put("K", {})
    (job,), _ = client.reserve(["q"])
    r.script_flush()
    if client.engine_mode == "function":
        r.function_flush()
    call = client.send_complete_and_reserve(job, ["q"])
    state, more, _ = call.result()
    assert (state, [j.jid for j in more]) == ("complete", [second])
    assert client.jobs[first].state == "complete"
    assert popped_count(client, [first, second]) == 2


def test_deferred_calls_use_their_own_connections(make_client: Callable[..., Client]) -> None:
    """Two completions in flight and the thread's own calls never read each other's replies."""
    client = make_client()
    q = client.queues["q"]
    jids = [q.put("K", {"n": n}) for n in range(6)]
    (a,), _ = client.reserve(["q"])
    (b,), _ = client.reserve(["q"])
    call_a = client.send_complete_and_reserve(a, ["q"])
    call_b = client.send_complete_and_reserve(b, ["q"], 2)
    assert client.jobs[jids[5]].state == "waiting"  # a plain call in between
    assert [j.jid for j in call_b.result()[1]] == jids[3:5]
    assert [j.jid for j in call_a.result()[1]] == [jids[2]]
    assert client.jobs[a.jid].state == client.jobs[b.jid].state == "complete"


@pytest.mark.usefixtures("redis7")
def test_reads_still_work_at_maxmemory(make_client: Callable[..., Client], r: redis.Redis) -> None:
    """Read commands go to the no-writes function, which Redis runs even when out of memory."""
    client = make_client(engine="auto")
    jid = client.queues["q"].put("K", {})
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory", used // 2)
    try:
        assert client.jobs[jid].state == "waiting"
        assert client.config["heartbeat"] == 60
        with pytest.raises(QlessError, match="OOM"):
            client.queues["q"].put("K", {})
    finally:
        r.config_set("maxmemory", 0)


def test_script_mode_without_fcall(
    make_client: Callable[..., Client], redis_version_info: tuple[int, ...]
) -> None:
    """On Redis 6.2 (no FCALL) the first call falls back to EVALSHA and sticks to it."""
    if redis_version_info >= (7,):
        pytest.skip("Redis 7 has FCALL")
    client = make_client()
    jid = client.queues["q"].put("K", {})
    assert client.engine_mode == "script"
    assert client.jobs[jid].state == "waiting"


@pytest.mark.usefixtures("redis7")
def test_script_mode_when_fcall_is_denied(
    make_client: Callable[..., Client], r: redis.Redis, redis_server: Any
) -> None:
    """A user without FCALL (or a Redis without it) gets EVALSHA, transparently."""
    r.acl_setuser("nofcall", enabled=True, passwords=["+pw"], keys=["~*"], channels=["*"],
                  commands=["+@all", "-fcall", "-fcall_ro", "-function"])
    try:
        limited = redis.Redis(unix_socket_path=redis_server.socket_path, username="nofcall",
                              password="pw", decode_responses=True)
        client = make_client(limited)
        jid = client.queues["q"].put("K", {})
        assert client.engine_mode == "script"
        assert client.jobs[jid].state == "waiting"
        limited.close()
    finally:
        r.acl_deluser("nofcall")


class FlushMidway(Client):
    """A client whose next pipeline has an engine flush spliced in after two commands."""

    flush_at: int | None = 2
    flush: tuple[str, str] = ("SCRIPT", "FLUSH")

    def _execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        if self.flush_at is None:
            return super()._execute_many(commands)
        spliced = list(commands)
        spliced.insert(self.flush_at, self.flush)
        replies = super()._execute_many(spliced)
        del replies[self.flush_at]
        self.flush_at = None
        return replies


class FunctionFlushMidway(FlushMidway):
    """The same with FUNCTION FLUSH, for a client calling the function library."""

    flush = ("FUNCTION", "FLUSH")


@pytest.mark.parametrize("cls,engine", [(FlushMidway, "script"), (FunctionFlushMidway, "auto")])
def test_pipeline_reruns_only_the_calls_that_found_the_engine_missing(
    make_client: Callable[..., Client], redis_version_info: tuple[int, ...],
    cls: type[Client], engine: str,
) -> None:
    if engine == "auto" and redis_version_info < (7,):
        pytest.skip("Redis functions need Redis 7")
    client = make_client(cls=cls, engine=engine)
    q = client.queues["q"]
    jids = [f"j{i}" for i in range(5)]
    calls = [("put", [client.worker_name, "q", j, "K", "{}", 0]) for j in jids]
    assert client.pipeline_calls(calls) == jids
    assert q.jobs.waiting(count=10) == jids
    for jid in jids:
        assert [e["what"] for e in client.jobs[jid].history] == ["put"]


def test_mutating_call_is_not_resent_after_a_read_timeout(
    make_client: Callable[..., Client], redis_server: Any
) -> None:
    client = make_client(socket_timeout=0.3)
    q = client.queues["q"]
    jids = [q.put("K", {}) for _ in range(5)]
    client.channel.load_script()
    client.channel.prepare(client.channel.invoker.command(("pop", "0")))  # pop's own script
    blocker = redis.Redis(unix_socket_path=redis_server.socket_path)
    thread = threading.Thread(target=blocker.eval, args=(BUSY, 0, 1.0))
    thread.start()
    time.sleep(0.15)
    started = time.monotonic()
    with pytest.raises(QlessConnectionError):
        q.pop()
    assert time.monotonic() - started < 0.9
    thread.join()
    blocker.close()
    # The EVALSHA that timed out on our side ran once when the server got free; nothing
    # re-sent it, so exactly one job was handed out.
    deadline = time.monotonic() + 5
    while popped_count(client, jids) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert popped_count(client, jids) == 1
    assert len(client.workers["w1"]["jobs"]) == 1


def test_timeout_under_client_pause_fails_fast(
    make_client: Callable[..., Client], r: redis.Redis
) -> None:
    client = make_client(socket_timeout=0.3)
    q = client.queues["q"]
    jids = [q.put("K", {}) for _ in range(3)]
    client.channel.load_script()
    r.execute_command("CLIENT", "PAUSE", 1000, "WRITE")
    started = time.monotonic()
    with pytest.raises(QlessConnectionError):
        q.pop()
    # A retrying client would have waited out the pause and popped a job.
    assert time.monotonic() - started < 0.8
    time.sleep(1.0)
    assert popped_count(client, jids) == 0
    assert q.pop() is not None


def test_fork_child_uses_its_own_connection(
    client: Client, make_client: Callable[..., Client]
) -> None:
    q = client.queues["q"]
    jid = q.put("K", {})
    parent_conn = client.read(lambda x: x.client_id())
    assert client.worker_name == "w1"
    default = make_client(client.redis, worker_name=None)
    parent_name = default.worker_name
    assert parent_name == f"{socket.gethostname()}-{os.getpid()}"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 3
        try:
            child_conn = default.read(lambda x: x.client_id())
            job = default.queues["q"].pop()
            ok = (
                child_conn != parent_conn
                and job is not None
                and job.jid == jid
                and default.worker_name == f"{socket.gethostname()}-{os.getpid()}"
                and job.worker_name == default.worker_name
            )
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client.read(lambda x: x.client_id()) == parent_conn
    assert default.worker_name == parent_name
    assert client.jobs[jid].worker_name == f"{socket.gethostname()}-{pid}"
    assert client.queues["q"].put("K", {})


def test_now_tracks_server_time_despite_a_skewed_local_clock(
    client: Client, r: redis.Redis, make_client: Callable[..., Client]
) -> None:
    skew = 7200.0
    clock = ServerClock(client.server_time, local=lambda: time.monotonic() + skew)
    skewed = make_client(client.redis, _clock=clock)
    seconds, micros = r.time()
    server_now = seconds + micros / 1e6
    assert abs(skewed.now() - server_now) < 0.5
    jid = skewed.queues["q"].put("K", {})
    assert abs(skewed.jobs[jid].history[0]["when"] - server_now) <= 1
    # The default client does the same with the real monotonic clock.
    assert abs(client.now() - server_now) < 0.5
    assert client.server_clock.offset is not None


def test_clock_refreshes_every_minute() -> None:
    local = [100.0]
    server = [5000.0]
    reads: list[float] = []

    def server_time() -> float:
        reads.append(server[0])
        return server[0]

    clock = ServerClock(server_time, local=lambda: local[0])
    assert clock() == 5000.0
    local[0] += 30
    assert clock() == 5030.0
    assert len(reads) == 1
    server[0] = 9000.0  # the server clock stepped; seen at the next refresh
    local[0] += 31
    assert clock() == 9000.0
    assert len(reads) == 2
    clock.reset()
    clock()
    assert len(reads) == 3


def test_clock_keeps_last_offset_when_refresh_fails() -> None:
    local = [0.0]
    fail = [False]

    def server_time() -> float:
        if fail[0]:
            raise QlessConnectionError("down")
        return 100.0

    clock = ServerClock(server_time, local=lambda: local[0])
    assert clock() == 100.0
    fail[0] = True
    local[0] = 61.0
    assert clock() == 161.0
    first = ServerClock(server_time, local=lambda: local[0])
    with pytest.raises(QlessConnectionError):
        first()


def test_the_testing_clock_hook_is_sent_as_now(make_client: Callable[..., Client]) -> None:
    client = make_client(_clock=lambda: 1234.75)
    jid = client.queues["q"].put("K", {})
    assert client.now() == 1234.75
    assert client.jobs[jid].history[0]["when"] == 1234


def test_first_calls_from_many_threads_all_succeed(make_client: Callable[..., Client]) -> None:
    """Threads racing through the engine's first load (or the 6.2 fallback) all get answers."""
    client = make_client(engine="auto")
    for i in range(20):
        make_client().queues["q"].put("K", {"i": i})
    errors: list[BaseException] = []
    popped: list[str] = []

    def reserve(n: int) -> None:
        try:
            jobs, _ = client.reserve(["q"], worker=f"t{n}")
            popped.extend(job.jid for job in jobs)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=reserve, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(popped)) == 20
