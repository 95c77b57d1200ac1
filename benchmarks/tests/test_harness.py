"""The harness measures what it says: counts, Lua-internal commands, latency pairing, report.

No assertion here is on speed; they check the bookkeeping around the timings.
"""

from __future__ import annotations

import _common
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
    text = report.format_capacity({"aggregate": agg, "systems": ["django-qless"]})
    assert "memory per waiting job, lean records" in text


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


@pytest.mark.parametrize(("ours", "status"), [(90.0, "met"), (89.0, "MISSED")])
def test_ratio_target_at_least(ours: float, status: str) -> None:
    agg = report.aggregate(_rounds({"enqueue_jobs_per_s": ours}, {"enqueue_jobs_per_s": 50.0}))
    got = {t["target"]: t for t in report.check_targets(agg)}
    assert got["enqueue >= 1.8x qless-py"]["status"] == status
    assert got["enqueue >= 1.05x huey"]["status"] == "n/a"


@pytest.mark.parametrize(("ours", "status"), [(0.9, "met"), (1.1, "MISSED")])
def test_absolute_target_at_most(ours: float, status: str) -> None:
    agg = report.aggregate({"django-qless": [{"latency_p50_ms": ours}]})
    got = {t["target"]: t for t in report.check_targets(agg)}
    assert got["latency p50 <= 1 ms"]["status"] == status


def test_bulk_target_divides_by_peer_single_put() -> None:
    agg = report.aggregate({"django-qless": [{"bulk_jobs_per_s": 1000.0}],
                            "qless-py": [{"enqueue_jobs_per_s": 100.0}]})
    got = {t["target"]: t for t in report.check_targets(agg)}
    assert got["bulk put >= 10x qless-py single put"]["value"] == pytest.approx(10.0)
    text = report.format_report(agg, ["django-qless", "qless-py"], report.check_targets(agg))
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


def test_capacity_checks_cover_every_target() -> None:
    agg = report.aggregate({
        "django-qless": [{"worker_1": {"redis_cpu_us_per_job": 80.0}, "memory_bytes_per_job": 500,
                          "memory_lean_bytes_per_job": 390.0,
                          "enqueue_jobs_per_s": 130.0, "drain_plain_jobs_per_s": 100.0,
                          "bulk_jobs_per_s": 1000.0}],
        "huey": [{"enqueue_jobs_per_s": 100.0, "drain_jobs_per_s": 100.0}],
        "qless-py": [{"enqueue_jobs_per_s": 100.0, "memory_bytes_per_job": 800}],
    })
    leg = report.aggregate({"django-qless": [{"enqueue_jobs_per_s": 100.0}]})
    doc = {"aggregate": agg, "systems": ["django-qless", "huey", "qless-py"],
           "leg62": {"aggregate": leg, "redis_version": "6.2.14"},
           "idle": {"django-qless": {"1": {"commands_per_s": 0.5,
                                           "cpu_over_baseline_us_per_s": 30.0,
                                           "latency_p50_ms": 0.5, "latency_p99_ms": 1.0}}},
           "scale": {"django-qless": {"depth_10000": {"put_redis_us": 10, "pop_redis_us": 10},
                                      "depth_1000000": {"put_redis_us": 11, "pop_redis_us": 20},
                                      "queues_1": {"put_redis_us": 10, "pop_redis_us": 10},
                                      "queues_200": {"put_redis_us": 10, "pop_redis_us": 10}}}}
    got = {t["target"]: t["status"] for t in report.capacity_checks(doc)}
    assert got["Redis CPU/job through the worker <= 90 us"] == "met"
    assert got["memory/waiting job <= 400 bytes"] == "MISSED"
    assert got["memory/waiting job <= 0.5x qless-py"] == "MISSED"  # 500 / 800
    assert got["memory/waiting job, lean records <= 400 bytes"] == "met"
    assert got["memory/waiting job, lean records <= 0.5x qless-py"] == "met"  # 390 / 800
    assert got["enqueue >= 1.2x huey"] == "met"
    assert got["plain pop()+complete() drain >= 1.2x huey"] == "MISSED"
    assert got["bulk put_many >= 10x qless-py single put"] == "met"
    assert got["6.2 within 1.25x of 7.x: enqueue_jobs_per_s"] == "MISSED"  # 130 / 100 = 1.3
    assert got["idle, 1 children: commands_per_s <= 1"] == "met"
    assert got["idle, 1 children: cpu_over_baseline_us_per_s <= 20"] == "MISSED"
    assert got["idle, 10 children: commands_per_s <= 1"] == "n/a"
    assert got["flat cost (waiting: depth_1000000 / depth_10000) pop_redis_us <= 1.25x"] == \
        "MISSED"
    assert got["flat cost (queues: queues_200 / queues_1) put_redis_us <= 1.25x"] == "met"
    instructions = "Redis instructions/job through the worker <= 0.6x the baseline's (callgrind)"
    assert got[instructions] == "n/a"  # (not counted)
    doc["worker_callgrind"] = {"jobs": 300, "instructions_per_job": 450_000.0}
    rows = {t["target"]: t for t in report.capacity_checks(doc)}
    assert rows[instructions]["status"] == "MISSED"  # 450k / 725,918 = 0.62
    assert abs(rows[instructions]["value"] - 450_000 / 725_918) < 1e-9
    doc["worker_callgrind"]["instructions_per_job"] = 400_000.0
    assert report.capacity_checks(doc)[1]["status"] == "met"
    text = report.format_capacity(doc)
    assert "CAPACITY PER REDIS CORE" in text and "REDIS 6.2 LEG" in text
    assert "REDIS INSTRUCTIONS PER WORKER JOB" in text and "400,000" in text
