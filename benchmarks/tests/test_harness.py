"""The harness measures what it says: counts, Lua-internal commands, latency pairing, report.

No assertion here is on speed; they check the bookkeeping around the timings.
"""

from __future__ import annotations

import _common
import capacity
import pytest
import report
from fake_worker import Fake


def test_drain_and_enqueue_count_every_job(redis_url: str) -> None:
    fake = Fake(redis_url)
    out = _common.measure_enqueue(fake, 500)
    assert out["enqueue_jobs_per_s"] > 0
    assert out["memory_bytes_per_10k"] > 0
    assert _common.measure_drain(fake, 300)["drain_jobs_per_s"] > 0
    assert fake.r.get("fake:done") == "300"


def test_lean_memory_row_measures_only_adapters_with_lean_records(redis_url: str) -> None:
    """The lean-records memory row: measured for django-qless (option on, then off again),
    absent for an adapter without the variant; the capacity table shows the row."""
    import redis as redis_py
    from django_qless_ import DjangoQless

    assert _common.measure_lean_memory(Fake(redis_url), 10) == {}
    out = _common.measure_lean_memory(DjangoQless(redis_url), 200)
    assert out["memory_lean_bytes_per_job"] > 0
    r = redis_py.Redis.from_url(redis_url, decode_responses=True)
    assert r.hget("ql:config", "lean-job-records") is None
    assert "jid" not in r.hgetall(r.keys("ql:j:*")[0])
    agg = report.aggregate({"django-qless": [{"memory_lean_bytes_per_job": 350.0}]})
    text = capacity.format_capacity({"aggregate": agg, "systems": ["django-qless"]})
    assert "(350 with lean records)" in text
    r.close()


def test_worker_cost_includes_commands_run_inside_lua(redis_url: str) -> None:
    fake = Fake(redis_url)
    for processes in (1, 2):
        out = _common.measure_worker(fake, 200, processes, timeout=60)
        # Per job: BLPOP + EVALSHA + the script's INCR and SET = 4 (plus a few idle BLPOPs
        # and connection set-up commands spread over the run).
        assert 4.0 <= out["redis_commands_per_job"] < 4.2, (out["top_commands"], out)
        assert out["top_commands"]["incr"] == 200
        assert out["top_commands"]["set"] == 200
        assert out["jobs_per_s"] > 0 and out["jobs_per_s_from_launch"] > 0


def test_latency_pairs_each_put_with_its_job(redis_url: str) -> None:
    out = _common.measure_latency(Fake(redis_url), 10, timeout=60)
    assert 0 < out["latency_p50_ms"] <= out["latency_p99_ms"] <= out["latency_max_ms"]
    assert out["latency_max_ms"] < 5000  # a line paired with t0=0 would be ~1.7e12 ms


def test_scale_probes_each_case(redis_url: str) -> None:
    out = _common.measure_scale(Fake(redis_url), [100, 400], probe=50, many_queues=5)
    assert set(out) == {"depth_100", "depth_400", "queues_1", "queues_5"}
    assert all(v["put_us"] > 0 and v["pop_us"] > 0 for v in out.values())
    # The smallest case, probed before and after the others, is the mean of both probes.
    first, again = out["depth_100"]["runs"]
    for field in ("put_us", "pop_us", "put_redis_us", "pop_redis_us"):
        assert out["depth_100"][field] == pytest.approx((first[field] + again[field]) / 2)
    assert out["queues_1"] is out["depth_100"]


def test_redis_cpu_is_the_main_threads(redis_url: str) -> None:
    """Redis CPU is read from the main thread's fields where the server has them (6.2+)."""
    import redis as redis_py

    r = redis_py.Redis.from_url(redis_url, decode_responses=True)

    def main_thread() -> float:
        cpu = r.info("cpu")
        return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])

    before = main_thread()
    value = _common.redis_cpu(r)
    assert before <= value <= main_thread()


def _rounds(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, list[dict]]:
    return {"django-qless": [ours, {k: v * 3 for k, v in ours.items()}, ours],
            "qless-py": [theirs]}


def test_aggregate_takes_medians_and_spread() -> None:
    agg = report.aggregate(_rounds({"enqueue_jobs_per_s": 100.0}, {"enqueue_jobs_per_s": 50.0}))
    entry = agg["django-qless"]["enqueue_jobs_per_s"]
    assert entry["median"] == 100.0
    assert entry["spread_pct"] == pytest.approx(200.0)


def test_ratios_divide_bulk_by_the_peers_single_put() -> None:
    agg = report.aggregate({"django-qless": [{"bulk_jobs_per_s": 1000.0}],
                            "qless-py": [{"enqueue_jobs_per_s": 100.0}]})
    text = report.format_report(agg, ["django-qless", "qless-py"])
    assert "10.00x" in text


def test_raw_floor_worker_counts_brpop_and_the_incr_body(redis_url: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from raw_ import Raw

    monkeypatch.setenv("BENCH_BODY", "incr")
    raw = Raw(redis_url)
    out = _common.measure_worker(raw, 200, 1, timeout=60)
    # Per job: BRPOP + the body's INCR (redis-py sends INCRBY), plus a few idle BRPOPs.
    assert 2.0 <= out["redis_commands_per_job"] < 2.2, out
    assert out["commandstats_per_job"]["incrby"]["calls"] == pytest.approx(1.0, abs=0.02)
    assert raw.r.get("bench:body") is not None


def test_plain_drain_uses_the_plain_step(redis_url: str) -> None:
    fake = Fake(redis_url)
    fake.pop_complete_plain = fake.pop_complete  # type: ignore[attr-defined]
    out = _common.measure_drain(fake, 100, plain=True)
    assert out["drain_plain_jobs_per_s"] > 0
    # LPOP + INCR per job; RESETSTAT is taken after the fill.
    assert out["drain_plain_redis_commands_per_job"] == pytest.approx(2.0, abs=0.05)


def test_monitor_names_engine_calls_and_lua_commands(redis_url: str) -> None:
    import threading

    import redis

    r = redis.Redis.from_url(redis_url)
    got: dict[str, list] = {}
    t = threading.Thread(target=lambda: got.setdefault("t", _common.monitor(redis_url, 1.5)))
    t.start()
    import time

    time.sleep(0.3)
    r.eval("redis.call('incr', 'mon:x'); return 1", 0, "cmd.name", "arg")
    t.join()
    summary = _common.monitor_summary(got["t"])
    assert summary.get("client: eval") == 1
    assert summary.get("lua: incr") == 1


def test_monitor_window_ends_on_an_idle_server(redis_url: str) -> None:
    assert isinstance(_common.monitor(redis_url, 0.3), list)  # ends on time on silence


def test_idle_measures_each_child_count_against_a_baseline(redis_url: str) -> None:
    # (the fake worker's connections settle at once: no need for the 12 s a real one takes)
    out = _common.measure_idle(Fake(redis_url), [1, 2], seconds=0.5, monitor_seconds=0.3,
                               samples=3, timeout=60, settle=0.2)
    assert set(out) == {"1", "2"}
    for e in out.values():
        assert e["commands_per_s"] >= 0 and e["baseline_cpu_us_per_s"] >= 0
        assert 0 < e["latency_p50_ms"] <= e["latency_max_ms"]
        assert "cpu_over_baseline_us_per_s" in e


def test_the_headline_table_has_the_readmes_rows() -> None:
    agg = report.aggregate({
        "django-qless": [{"worker_1": {"redis_cpu_us_per_job": 80.0, "jobs_per_s": 5000.0},
                          "memory_bytes_per_job": 455.0, "memory_lean_bytes_per_job": 389.0,
                          "enqueue_jobs_per_s": 130.0, "drain_plain_jobs_per_s": 100.0,
                          "drain_jobs_per_s": 120.0, "bulk_jobs_per_s": 1000.0,
                          "latency_p50_ms": 1.03, "latency_p99_ms": 1.66}],
        "huey": [{"enqueue_jobs_per_s": 100.0, "drain_jobs_per_s": 90.0}],
    })
    leg = report.aggregate({"django-qless": [{"enqueue_jobs_per_s": 65.0}]})
    doc = {"aggregate": agg, "systems": ["huey", "django-qless"],
           "leg62": {"aggregate": leg, "redis_version": "6.2.14"},
           "idle": {"django-qless": {"1": {"commands_per_s": 0.13}, "10": {"commands_per_s": 0.13},
                                     "100": {"commands_per_s": 0.13}},
                    "huey": {"1": {"commands_per_s": 4.0}, "10": {"commands_per_s": 13.0}}},
           "worker_callgrind": {"jobs": 300, "instructions_per_job": 375_340.0}}
    text = capacity.format_capacity(doc)
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")[1:]
            for line in text.splitlines() if line.startswith("| ")}
    assert rows["per job"] == ["django-qless", "huey"]  # (ours first)
    assert rows["enqueue, one call each (jobs/s)"] == ["130", "100"]
    assert rows["enqueue, `put_many` (jobs/s)"] == ["1,000", "–"]
    assert rows["drain, plain `pop()` + `complete()` (jobs/s)"] == ["100", "90.0"]
    assert rows["Redis instructions, worker (callgrind)"] == ["375k", "–"]
    assert rows["memory per waiting job (bytes)"] == ["455 (389 with lean records)", "–"]
    assert rows["idle worker, 1 / 10 / 100 children (commands/s)"] == \
        ["0.13 / 0.13 / 0.13", "4.00 / 13.0 / –"]
    assert rows["put → start p50 / p99, idle worker (ms)"] == ["1.03 / 1.66", "–"]
    assert "worker, 2 processes (jobs/s)" not in rows  # (measured by no system)
    assert "REDIS 6.2 (6.2.14, EVALSHA)" in text
    assert capacity.leg62_slowdowns(agg, leg)["enqueue_jobs_per_s"] == 2.0
