"""Per-command scripts (bundles) for servers without functions: same replies, fewer helpers."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.console import engine_slowlog
from django_qless.core.engine.bundles import bundle_sha, bundle_text, unresolved
from django_qless.core.engine.channel import NodeChannel
from django_qless.core.engine.lua import _read_sources as engine_sources
from django_qless.core.engine.lua import routes, script_sha, script_text
from django_qless.core.engine.reach import Unsure, split, split_loader
from tests.core.conftest import FakeClock
from testservers.redis_server import RedisServer

HOT = ("put", "reserve", "reserve.wait", "complete.reserve", "pop", "complete", "heartbeat",
       "fail", "config.get")


def test_every_hot_command_has_a_smaller_bundle() -> None:
    full = script_text()
    for command in HOT:
        text = bundle_text(command)
        assert text is not None, command
        assert len(text) < len(full), command
        assert f" {command}=" in text  # its route, and no other command's
        assert text.count("=") < full.count("=")
    # The analysis follows the whole engine as it stands (None would mean: full script).
    assert all(bundle_text(command) is not None for command in routes())
    assert bundle_text("no.such.command") is None
    assert bundle_sha("no.such.command") is None


def test_config_get_bundle_holds_only_what_it_reaches() -> None:
    text = bundle_text("config.get")
    assert text is not None
    assert "C['config.get'] = " in text
    for absent in ("Q.mod.put = ", "Q.mod.pop = ", "C['put'] = ", "C['config.set'] = ",
                   "function Q.compact_put(", "function Q.exhausted("):
        assert absent not in text, absent
    # Every helper the bundle defines is used in it (not only defined).
    defined = re.findall(r"^function Q\.(\w+)\(|^Q\.(\w+) = ", text, re.MULTILINE)
    for name in {a or b for a, b in defined}:
        assert len(re.findall(rf"Q\.{name}\b", text)) > 1, name


def test_a_command_that_wakes_no_queue_leaves_the_hand_off_out() -> None:
    heartbeat, put = bundle_text("heartbeat"), bundle_text("put")
    assert heartbeat is not None and put is not None
    assert "Q.mod.handoff = " not in heartbeat
    assert "Q.mod.handoff = " in put  # put wakes its queue: idle workers get the job


# Fields the engine tests for truth before calling them (made by modules a call may not load).
OPTIONAL = {"Q.flush_stats", "Q.hand_off", "Q.held_stats", "Q.histogram", "Q.welford"}


def test_every_bundle_defines_what_it_calls() -> None:
    """A helper moved into a module that neither the route nor a Q.need loads is caught here,
    not by the call that reaches it."""
    for command in routes():
        assert unresolved(command) <= OPTIONAL, command


def test_a_plain_put_builds_no_moved_job_helpers() -> None:
    """put's moved-job code, list checks, throttles and the history helpers load only at the
    branch that needs them: in put's bundle they sit in loaders, none at the top level."""
    text = bundle_text("put")
    assert text is not None
    assert "Q.mod.putmove = " in text and "Q.mod.lists = " in text
    cold = re.search(r"^Q\.mod\._cold = function\(\)$(.*?)^end -- _cold$", text, re.M | re.S)
    assert cold is not None
    top = text.replace(cold.group(0), "")
    for helper in ("function Q.history(", "function Q.lock_lost(", "function Q.tag_remove(",
                   "function Q.integer("):
        assert helper in cold.group(1), helper
        assert not re.search(rf"^{re.escape(helper)}", top, re.M), helper
    # every loader its route does not load runs the deferred helpers first
    for name in ("putmove", "lists", "throttle", "job", "handoff"):
        head = re.search(rf"^Q\.mod\.{name} = function\(\)\n(.*)\n", text, re.M)
        assert head is not None and head.group(1) == "  Q.need('_cold')", name


_RACE = """
import sys, threading
from django_qless.core.engine import bundles as lua_bundles
texts = []
def build():
    for command in ("reserve", "complete", "pop", "put"):
        texts.append((command, lua_bundles.bundle_text.__wrapped__(command)))
threads = [threading.Thread(target=build) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
sys.stdout.write(str(len(set(texts))))
"""


def test_threads_building_their_first_bundles_at_once_get_the_same_text() -> None:
    """A worker's threads build bundles together on their first calls: each bundle must be
    made from one analysis of the sources (ids of another thread's statements pruned the
    whole base, `Q` included, and the server refused the script)."""
    out = subprocess.run([sys.executable, "-c", _RACE], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout == "4"


def test_a_bundle_sizes_q_for_its_fields_with_about_half_of_them() -> None:
    for command in HOT:
        text = bundle_text(command)
        assert text is not None
        constructor = re.search(r"\nlocal Q = \{\n(.*?)\n\}\n", text, re.DOTALL)
        assert constructor is not None, command
        listed = re.findall(r"(\w+) = false,", constructor.group(1))
        # (at the top level or by a loader of its route: not by one loaded only at a branch,
        # nor the helpers deferred with those)
        sections = re.split(r"^-- ==== (\w+)\.lua ====$", text, flags=re.M)
        always = "".join(
            body for name, body in zip(sections[1::2], sections[2::2], strict=True)
            if f"Q.mod.{name} = " not in body or name in routes()[command])
        always = re.sub(r"^Q\.mod\._cold = function\(\)$.*?^end -- _cold$", "", always,
                        flags=re.M | re.S)
        made = set(re.findall(r"^(?:  )?function Q\.(\w+)\(|^(?:  )?Q\.(\w+) = ", always,
                              re.MULTILINE))
        fields = {a or b for a, b in made}
        assert set(listed) <= fields, command
        # Lua gives a constructor of n fields a hash part of the power of two at or above n:
        # room for every field made, from just over half of that power of two.
        room = 1 << (len(listed) - 1).bit_length()
        assert len(fields) <= room, command
        assert len(listed) == min(len(fields), room // 2 + 1), command


def test_the_analysis_gives_up_on_what_it_cannot_follow() -> None:
    with pytest.raises(Unsure):
        split("local Q = {}\nlocal name = 'x'\nQ[name] = 1\n")
    with pytest.raises(Unsure):
        split("local t = _G\n")
    with pytest.raises(Unsure):
        split("local a = 'x' ..\n'y'\n")
    st = split("local Q = {}\nfunction Q.f(a) return Q.g(a) end\nQ.g = function() end\n")
    assert [sorted(s.defines) for s in st] == [["Q"], ["Q.f"], ["Q.g"]]
    assert {"Q.g", "Q"} <= st[1].mentions


def test_a_loader_body_split_from_its_file_s_tokens_is_the_body_split_anew() -> None:
    """split_loader reuses the tokens of the file's split: the statements must be the ones
    a fresh split of the body text gives (text, definitions, mentions)."""
    sources = engine_sources()
    loaders = 0
    for mod, text in sources.items():
        for st in split(text):
            if not any(n.startswith("mod:") for n in st.defines):
                continue
            assert st.tokens, mod  # kept for split_loader
            reused = split_loader(st, mod)
            st.tokens = []
            anew = split_loader(st, mod)
            assert reused is not None and anew is not None, mod
            assert [(b.text, b.defines, b.mentions, b.root) for b in reused.body] == [
                (b.text, b.defines, b.mentions, b.root) for b in anew.body], mod
            loaders += 1
    assert loaders >= 10


# ----------------------------------------------------------------- same replies, same data

def _normal(reply: Any) -> Any:
    """A reply, or an error's message without the script's name and line."""
    if isinstance(reply, redis.ResponseError):
        text = re.sub(r"f_[0-9a-f]{40}", "f_<sha>", str(reply))
        text = re.sub(r" script: [0-9a-f]{40}, on @user_script:\d+\.$", "", text)  # Redis 7
        return ("error", re.sub(r"@?user_script:\d+: ", "", text))
    return reply


def _dump(conn: redis.Redis) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in conn.keys("*"):
        kind = conn.type(key)
        if kind == "hash":
            out[key] = conn.hgetall(key)
            if key.endswith("config"):
                # The known-empty marks' tag names the engine instance that wrote it (each
                # script or bundle is one): equal only in that it is there.
                out[key]["#marks"] = "#marks" in out[key]
        elif kind == "zset":
            out[key] = conn.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            out[key] = conn.lrange(key, 0, -1)
        elif kind == "set":
            out[key] = sorted(conn.smembers(key))
        else:
            out[key] = conn.get(key)
    return out


@pytest.fixture
def two_dbs(redis_server: RedisServer) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """Two flushed databases of the test server: the full script's and the bundles'."""
    conns = tuple(redis.Redis(unix_socket_path=redis_server.socket_path, db=db,
                              decode_responses=True) for db in (14, 15))
    for conn in conns:
        conn.flushdb()
    yield conns  # type: ignore[misc]
    for conn in conns:
        conn.flushdb()
        conn.close()


# (command, args) in order; `now` advances 1 s a call. Covers the hot path, a hand-off to an
# idle worker, lock expiry, retries, errors.
SCENARIO: list[tuple[str, list[str]]] = [
    ("config.get", ["heartbeat"]), ("config.get", []), ("config.set", ["heartbeat", "30"]),
    ("config.get", ["heartbeat"]), ("config.get", ["nope"]),
    ("put", ["w0", "q", "j1", "K", '{"a":1}', "0"]),
    ("put", ["w0", "q", "j2", "K", "{}", "0", "priority", "5", "tags", '["t"]']),
    ("put", ["w0", "q", "j3", "K", "{}", "2", "retries", "1"]),
    ("put", ["w0", "q", "j4", "K", "{}", "0", "depends", '["j1"]']),
    ("reserve", ["w1", "1", "q"]),
    ("heartbeat", ["j2", "w1"]), ("heartbeat", ["j2", "wrong"]),
    ("complete.reserve", ["j2", "w1", "q", "{}", "", "2", "q"]),
    ("pop", ["q", "w2", "1"]),
    ("fail", ["j3", "w2", "boom", "it broke"]), ("fail", ["j1", "w1", "g", "m"]),
    ("complete", ["j1", "w1", "q", "{}"]),
    ("reserve.wait", ["w3", "30", "1", "q", "other"]),
    ("reserve.wait", ["w4", "30", "1", "other"]),
    ("put", ["w0", "other", "j5", "K", "{}", "0"]),  # handed to w4 at once
    ("complete", ["j5", "w4", "other", "{}"]),
    ("put", ["w0", "q", "j6", "K", "{}", "0"]),
    ("pop", ["q", "w5", "5"]),
    ("complete.reserve", ["j6", "w5", "q", "{}", "", "1", "q", "other"]),
    ("put", ["w0", "q"]), ("pop", ["q", "w1", "x"]), ("complete", ["nope", "w1", "q", "{}"]),
    ("heartbeat", ["j6", "w5"]),
]


def test_bundles_reply_and_write_as_the_full_script(
    two_dbs: tuple[redis.Redis, redis.Redis],
) -> None:
    full_db, bundle_db = two_dbs
    full = full_db.register_script(script_text(True))
    for step, (command, args) in enumerate(SCENARIO):
        text = bundle_text(command, True)
        assert text is not None, command
        argv = [command, str(1_000_000 + step * 1.5), *args]
        if command == "pop" and step > 20:
            argv[1] = str(1_000_000 + 100 + step)  # past every lease: expiries are handled
        replies = []
        for conn, script in ((full_db, full), (bundle_db, bundle_db.register_script(text))):
            try:
                replies.append(_normal(script(keys=[], args=argv, client=conn)))
            except redis.ResponseError as exc:
                replies.append(_normal(exc))
        assert replies[0] == replies[1], (step, command)
    assert _dump(full_db) == _dump(bundle_db)
    assert len(_dump(full_db)) > 10


# ----------------------------------------------------------------- the client's loading

@pytest.fixture
def script_client(redis_url: str, clock: FakeClock) -> Iterator[Client]:
    """A client calling the engine by EVALSHA (as on a server without functions)."""
    client = Client(redis_url, worker_name="w1", _clock=clock, engine="script")
    yield client
    client.close()


def test_client_loads_each_bundle_and_again_after_a_script_flush(
    script_client: Client, r: redis.Redis, clock: FakeClock
) -> None:
    client = script_client
    if not isinstance(client.channel, NodeChannel):
        pytest.skip("cluster channels call the full script")
    q = client.queues["q"]
    q.put("K", {}, jid="a")
    put_sha = client.channel.invoker.command(("put", "0"))[1]
    assert put_sha == bundle_sha("put", True) != script_sha(True)
    assert r.script_exists(put_sha) == [True]
    r.script_flush()
    clock.advance(1)
    q.put("K", {}, jid="b")  # NOSCRIPT: loaded again, then run once
    assert r.script_exists(put_sha) == [True]
    assert q.jobs.waiting() == ["a", "b"]
    r.script_flush()
    clock.advance(1)
    # A pipelined batch of several commands: each missing script is loaded, each call runs once.
    replies = client.pipeline_calls([("config.get", ["heartbeat"]), ("put", [
        "w0", "q", "c", "K", "{}", 0]), ("config.get", ["grace-period"])])
    assert [str(x) for x in replies] == ["60", "c", "10"]
    assert q.jobs.waiting() == ["a", "b", "c"]
    r.script_flush()
    (job,), _ = client.reserve(["q"])
    assert job.jid == "a"
    r.script_flush()
    call = client.send_complete_and_reserve(job, ["q"])  # deferred: loads, then sends
    state, jobs, _ = call.result()
    assert state == "complete" and [j.jid for j in jobs] == ["b"]


def test_a_client_calling_bundles_never_loads_the_full_script(
    r: redis.Redis, redis_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full script is loaded only where a call names it (bundles off): otherwise it would
    sit in the server's script cache and Lua heap (a megabyte on 6.2) for nobody."""
    for bundles, full_loaded in (("1", False), ("0", True)):
        r.script_flush()
        monkeypatch.setenv("QLESS_ENGINE_BUNDLES", bundles)
        client = Client(redis_url, worker_name="w1", _clock=clock, engine="script")
        if not isinstance(client.channel, NodeChannel):
            pytest.skip("cluster channels call the full script")
        try:
            client.load_engine()
            q = client.queues["q"]
            q.put("K", {}, jid=f"j{bundles}")
            q.put_many([{"klass": "K", "data": {}}])
            client.pipeline_calls([("config.get", ["heartbeat"]), ("config.get", ["heartbeat"])])
            assert r.script_exists(script_sha(True)) == [full_loaded], bundles
            put_sha = client.channel.invoker.command(("put", "0"))[1]
            assert r.script_exists(put_sha) == [True]
        finally:
            client.close()


def test_slow_log_names_the_calls_of_bundles(script_client: Client, r: redis.Redis) -> None:
    if not isinstance(script_client.channel, NodeChannel):
        pytest.skip("cluster channels call the full script")
    r.config_set("slowlog-log-slower-than", 0)
    try:
        script_client.queues["q"].put("K", {}, jid="slow1")
        slow = engine_slowlog(script_client)
    finally:
        r.config_set("slowlog-log-slower-than", 10000)
        r.slowlog_reset()
    put = next(e for e in slow if e["command"] == "put")
    assert "slow1" in put["args"].split(" ")
