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


def test_worker_cost_includes_commands_run_inside_lua(redis_url: str) -> None:
    fake = Fake(redis_url)
    for processes in (1, 2):
        out = _common.measure_worker(fake, 200, processes, timeout=60)
        # Per job: BLPOP + EVALSHA + the script's INCR and SET = 4 (plus a few idle BLPOPs
        # and connection set-up commands spread over the run).
        assert 4.0 <= out["redis_commands_per_job"] < 4.2, out
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
