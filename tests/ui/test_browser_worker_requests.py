"""Quiet and Stop in headless Chromium against real worker processes; the overview's
Workers panel shows the states and their counts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.client import Client as CoreClient
from tests.helpers import WorkerProcess, wait_until
from tests.ui.browser import wait_live

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


@pytest.fixture
def worker_procs(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for proc in started:
        proc.kill_all()


def busy_worker(qc: Any, url: str, tmp: Path, started: list[WorkerProcess],
                processes: str) -> tuple[WorkerProcess, str]:
    """Start a worker running a 3 s job; return it and the name of the worker holding it."""
    proc = WorkerProcess(url, ["q", "-n", processes, "--beat", "2"], tmp)
    started.append(proc)
    qc.queues["q"].put("tests.worker.jobs.sleepy", {"seconds": 3}, jid="slow")
    wait_until(lambda: qc.jobs["slow"].state == "running", timeout=30)
    return proc, str(qc.jobs["slow"].worker_name)


@pytest.mark.parametrize("processes", ["0", "2"])
def test_quiet_from_the_worker_page_lets_the_job_finish(
    page: Any, qc: Any, qless_settings: str, tmp_path: Path,
    worker_procs: list[WorkerProcess], processes: str,
) -> None:
    proc, name = busy_worker(qc, qless_settings, tmp_path, worker_procs, processes)
    page.goto(f"{page.base}/qless/workers/{name}")
    page.accept = True  # the button's confirmation
    page.click("button:text('Quiet')")
    page.wait_for_url(re.compile(rf".*/qless/workers/{name}$"))
    page.wait_for_selector(f"text=Asked worker {name} to be quiet")
    assert proc.wait(30) == 0
    assert qc.jobs["slow"].state == "complete"


@pytest.mark.parametrize("processes", ["0", "2"])
def test_stop_from_the_workers_list_gives_the_job_back(
    page: Any, qc: Any, qless_settings: str, tmp_path: Path,
    worker_procs: list[WorkerProcess], processes: str,
) -> None:
    proc, name = busy_worker(qc, qless_settings, tmp_path, worker_procs, processes)
    page.goto(f"{page.base}/qless/workers/")
    row = page.locator("tr", has=page.locator(f"a:text('{name}')"))
    page.accept = True
    row.locator("button:text('Stop')").click()
    page.wait_for_selector(f"text=Asked worker {name} to stop")
    assert page.url.endswith("/qless/workers/")  # back where the user was
    assert proc.wait(30) == 0
    assert qc.jobs["slow"].state == "waiting"


def test_a_dismissed_confirmation_asks_nothing(page: Any, qc: Any) -> None:
    CoreClient(qc.redis, worker_name="w1", _clock=qc.now).workers.hello("w1", "h", 1, ["q"])
    page.goto(f"{page.base}/qless/workers/w1")
    page.click("button:text('Stop')")  # (dismissed: page.accept is False)
    assert page.dialogs and "Stop worker w1 now?" in page.dialogs[0]
    assert qc.workers.info("w1")[0]["request"] == ""


def test_overview_workers_panel_shows_states_and_counts(page: Any, qc: Any) -> None:
    for name, ago in (("w-a", 0.0), ("w-b", 0.0), ("w-late", 100.0), ("w-gone", 900.0)):
        client = CoreClient(qc.redis, worker_name=name, _clock=lambda ago=ago: qc.now() - ago)
        client.workers.hello(name, "h", 1, ["q"])
    page.goto(f"{page.base}/qless/")
    panel = page.locator("section", has=page.locator("h2:text('Workers')"))
    assert "2 live, 1 stale, 1 dead" in panel.locator("h2").inner_text()
    gone = panel.locator("tr", has=page.locator("a:text('w-gone')"))
    assert "dead" in gone.inner_text() and "qless-state-dead" in gone.inner_html()
    wait_live(page)  # the live refresh keeps states and counts
    CoreClient(qc.redis, worker_name="w-c", _clock=qc.now).workers.hello("w-c", "h", 1, ["q"])
    panel.locator("h2", has_text="3 live, 1 stale, 1 dead").wait_for()
    fresh = panel.locator("tr", has=page.locator("a:text('w-c')"))
    fresh.wait_for()
    assert "qless-state-live" in fresh.inner_html()
    assert page.dialogs == []
