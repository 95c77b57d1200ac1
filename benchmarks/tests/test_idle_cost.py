"""idle_cost.py: the parse of callgrind's table, the arithmetic judged, and its probes."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import redis
from idle_cost import (
    LOOP,
    MEMSTATS,
    SENT_BY_CLIENTS,
    _idle_connections,
    _socket_path,
    _window,
    client_only_commands,
    count_commands,
    split_functions,
)
from idle_cost import summarize as summarize_idle
from report import capacity_checks

ANNOTATE = """\
--------------------------------------------------------------------------------
12,730,992 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
12,645,512 (99.33%)  ???:aeMain'2 [/usr/bin/redis-server]
12,000,000 (94.00%)  ???:aeMain [/usr/bin/redis-server]
 5,677,675 (44.60%)  ./string/memset-erms.S:__memset_avx2 [/lib/libc.so.6]
   968,129 ( 7.60%)  ???:clientsCron [/usr/bin/redis-server]
   186,728 ( 1.47%)  ./nptl/trylock.c:pthread_mutex_trylock@@GLIBC_2.34 [/lib/libc.so.6]
"""


def test_split_functions_keeps_the_deepest_recursion_level_and_skips_totals() -> None:
    got = split_functions(ANNOTATE)
    assert got["aeMain"] == 12_645_512  # aeMain'2 and aeMain: the max, not the sum
    assert got["clientsCron"] == 968_129
    assert got["__memset_avx2"] == 5_677_675
    assert got["pthread_mutex_trylock@@GLIBC_2.34"] == 186_728
    assert "PROGRAM" not in got and "TOTALS" not in got


def _w(loop: int, memstats: int, commands: int, sent: int = 0,
       seconds: float = 10.0) -> dict[str, object]:
    return {"seconds": seconds, "instructions": loop + 1000, "commands": commands,
            "client_commands": sent, "parts": {LOOP: loop, MEMSTATS: memstats},
            "connections": 4}


def test_summarize_judges_the_loop_less_memory_stats_plus_commands_clients_sent() -> None:
    doc = {"seconds": 10.0,
           "calibration": {"us_per_instruction": 0.001, "ping_us": 5.0},
           "baseline": _w(1_000_000, 900_000, 0), "baseline_end": _w(1_010_000, 900_000, 0),
           "children": {"1": _w(1_300_000, 1_000_000, 12, 2),
                        "10": _w(1_300_000, 1_000_000, 12, 2)}}
    w = summarize_idle(doc)["children"]["1"]
    # (1.3M - 1.0M) - (1.0M - 0.9M) = 200k Ir over 10 s: the memory statistics do not count.
    assert w["judged_instructions_per_s"] == pytest.approx(20_000)
    assert w["commands_per_s"] == pytest.approx(1.2)
    assert w["client_commands_per_s"] == pytest.approx(0.2)
    # The 10 commands the scripts ran are in the instructions: only the 2 sent are priced.
    assert w["us_per_s"] == pytest.approx(20_000 * 0.001 + 0.2 * 5.0)
    assert w["us_per_child_per_s"] == w["us_per_s"]
    ten = doc["children"]["10"]
    assert ten["us_per_child_per_s"] == pytest.approx(ten["us_per_s"] / 10)
    assert doc["resolution_us_per_s"] == pytest.approx(1_000 * 0.001)


def test_count_commands_leaves_out_the_bench_and_tells_sent_from_script_run() -> None:
    stats = {"cmdstat_fcall": {"calls": 2}, "cmdstat_time": {"calls": 3},
             "cmdstat_hgetall": {"calls": 1}, "cmdstat_ping": {"calls": 1},
             "cmdstat_client|kill": {"calls": 1}, "cmdstat_info": {"calls": 3},
             "cmdstat_config|resetstat": {"calls": 1}}
    only = frozenset({"fcall", "ping", "client|kill"})
    # Sent: 2 FCALL, PING, CLIENT KILL and the TIME beyond the 2 the engine calls ran.
    assert count_commands(stats, only) == (8, 5)


def test_the_engine_never_calls_what_is_counted_as_sent_by_clients() -> None:
    lua = Path(__file__).resolve().parents[2] / "django_qless" / "lua"
    text = "\n".join(p.read_text() for p in lua.glob("*.lua"))
    for name in SENT_BY_CLIENTS:
        assert not re.search(rf"""['"]{name}['"]""", text, re.IGNORECASE)
    # One TIME per engine call, at its entry: the rest are clients' clocks.
    assert len(re.findall(r"""['"]TIME['"]""", text)) == 1
    assert "local t = redis.call('TIME')" in (lua / "api.lua").read_text()


def test_commands_counted_as_sent_are_what_monitor_shows_clients_sent(redis_url: str) -> None:
    from django_qless.core.client import Client

    r = redis.Redis.from_url(redis_url)
    only = client_only_commands(r)
    assert {"fcall", "evalsha", "subscribe", "hello", "ping"} <= only
    assert "time" not in only and "hgetall" not in only
    with Client(redis_url) as loader:
        loader.reap()  # the engine loaded before the window (FUNCTION LOAD is sent too)
    mon = redis.Redis.from_url(redis_url).monitor()
    seen: list[str] = []

    def read() -> None:
        try:
            while True:
                line = mon.next_command()
                if line["command"].startswith("INFO"):
                    return
                seen.append((line["client_type"], line["command"]))
        except (redis.ConnectionError, OSError, ValueError):
            pass

    with mon:
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        r.config_resetstat()
        # What an idle worker sends: HELLO, its clock's TIME, engine calls, SUBSCRIBE, PING.
        client = Client(redis_url)
        client.reap()
        client.config.all  # noqa: B018 - the read is the point
        sub = redis.Redis.from_url(redis_url).pubsub()
        sub.subscribe("idle-cost:test")
        sub.ping()
        time.sleep(0.2)
        calls, sent = count_commands(r.info("commandstats"), only)
        reader.join(timeout=5)
        sub.close()
        client.close()
    ours = [(kind, c) for kind, c in seen if not c.startswith("CONFIG RESETSTAT")]
    # MONITOR marks what scripts ran ("lua"): the rest crossed a socket.
    assert calls == len(ours)
    assert sent == sum(1 for kind, _ in ours if kind != "lua") < calls
    assert ("unix", "TIME") in ours and ("lua", "TIME") in ours
    r.close()


def test_capacity_checks_judge_idle_cpu_on_the_counted_instructions() -> None:
    info_cpu = {"100": {"cpu_over_baseline_us_per_s": 400.0}}
    doc = {"aggregate": {}, "idle": {"django-qless": info_cpu},
           "idle_callgrind": {"children": {"100": {"us_per_s": 12.0}}}}
    rows = {r["target"]: r for r in capacity_checks(doc)}
    row = rows["idle, 100 children: redis_us_per_s (callgrind) <= 20"]
    assert (row["value"], row["status"]) == (12.0, "met")
    # Per idle child: the total over the children (older documents hold the total only).
    row = rows["idle, 100 children: redis_us_per_s per child (callgrind) <= 20"]
    assert (row["value"], row["status"]) == (pytest.approx(0.12), "met")
    doc["idle_callgrind"]["children"]["100"] = {"us_per_s": 2100.0, "us_per_child_per_s": 21.0}
    rows = {r["target"]: r for r in capacity_checks(doc)}
    assert rows["idle, 100 children: redis_us_per_s per child (callgrind) <= 20"]["status"] \
        == "MISSED"
    doc.pop("idle_callgrind")
    rows = {r["target"]: r for r in capacity_checks(doc)}
    assert rows["idle, 100 children: cpu_over_baseline_us_per_s <= 20"]["value"] == 400.0


def test_idle_connections_are_held_then_all_closed(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    base = int(r.info("clients")["connected_clients"])
    with _idle_connections(r, _socket_path(redis_url), 6):
        assert int(r.info("clients")["connected_clients"]) == base + 6
        assert len(r.pubsub_channels("idle-cost:*")) == 3  # every other one subscribed
    assert int(r.info("clients")["connected_clients"]) == base
    r.close()


@pytest.mark.skipif(not shutil.which("valgrind"), reason="valgrind is not installed")
def test_a_window_counts_the_event_loop_and_the_commands() -> None:
    from callgrind_redis import callgrind_redis

    from testservers.redis_server import find_redis_server

    with callgrind_redis(find_redis_server(), "idle-cost-test-") as cg:
        r = redis.Redis(unix_socket_path=cg.sock)
        w = _window(cg, r, 1.0, "test")
        assert w["instructions"] >= w["parts"][LOOP] > 0  # the cron ran ~10 times
        assert w["commands"] == 0  # our INFO and CONFIG are not counted
        r.close()


def test_a_probe_reconnect_sends_what_a_new_client_sends_and_closes(redis_url: str) -> None:
    from idle_cost import _reconnect

    r = redis.Redis.from_url(redis_url)
    base = int(r.info("clients")["connected_clients"])
    r.config_resetstat()
    _reconnect(_socket_path(redis_url))
    stats = r.info("commandstats")
    assert stats["cmdstat_hello"]["calls"] == 1 and stats["cmdstat_time"]["calls"] == 1
    wait = time.monotonic() + 5
    while int(r.info("clients")["connected_clients"]) > base and time.monotonic() < wait:
        time.sleep(0.05)
    assert int(r.info("clients")["connected_clients"]) == base
    r.close()


def test_format_reconnect_gives_the_break_even_idle_time() -> None:
    from idle_cost import format_reconnect

    doc = {"idle_connection_instructions_per_s": 5_000.0, "reconnect_instructions": 40_000.0,
           "reconnects": 40, "native_reconnect_us": 20.0, "native_ping_us": 8.0,
           "resolution_instructions_per_s": 100.0}
    text = format_reconnect(doc, 0.0005)  # 1 Ir = 0.5 ns: the connection costs 2.5 us/s
    assert "break-even after 8.0 s idle by instructions" in text
    assert "8.0 s by the native reconnect" in text
