"""limits_cost.py and `run.py --limits-only`: the run prints the cron and rate limit rows."""

from __future__ import annotations

import pytest
import run
from limits_cost import format_limits, wait_cost


def test_the_run_prints_the_schedule_and_rate_limit_rows(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--limits-only", "--quick", "--no-save", "--skip-limits-callgrind",
                     "--no-install"]) == 0
    out = capsys.readouterr().out
    for row in ("job put by hand, popped, completed", "cron tick (* * * * *)",
                "pop, no rate limit", "pop, queue limit", "pop, limit on the job class",
                "waiting for a rate limit's window"):
        assert row in out
    assert "WHAT A JOB COSTS" not in out  # no rounds ran


def test_an_idle_worker_waiting_for_the_window_runs_no_commands(redis_url: str) -> None:
    wait = wait_cost(redis_url, 2.0)
    assert wait["commands"] == 0 and not wait["popped_during_window"]
    assert wait["start_after_opening_ms"] >= -5  # not before the window opened (5 ms polls)


def test_the_rows_say_with_and_without() -> None:
    cost = {"commands": 1.0, "redis_us": 2.0}
    text = format_limits({
        "ticks": 1, "pops": 1,
        "schedule": {"with": cost, "without": cost, "idle_check_commands": 2},
        "rate": {"none": cost, "queue": cost},
        "wait": {"seconds": 1, "commands": 0, "popped_during_window": False,
                 "start_after_opening_ms": 1.0},
        "schedule_instr": {"with": 2000.0, "without": 1000.0}})
    assert "2.0k" in text and "1.0k" in text and "0 Redis commands in 1 s" in text
