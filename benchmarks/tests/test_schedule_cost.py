"""schedule_cost.py: counts a short run and reports every line."""

from __future__ import annotations

from schedule_cost import measure, report


def test_schedule_cost_counts_ticks_top_ups_and_the_baseline(redis_url: str) -> None:
    results = measure(redis_url, 64)
    assert results["schedule, per tick"]["fcall"] == 2 * 64  # a pop and a complete a tick
    assert results["put by hand, per job"]["fcall"] == 3 * 64
    assert results["idle check, per 5 min"]["fcall"] == 1
    assert "commands per tick" in report(results, 64)
