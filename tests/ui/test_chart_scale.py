"""Charts carry a y-axis scale: a round top above the peak, gridlines with their values."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from django_qless.views.chart_scale import nice_top
from django_qless.views.console import bar_chart
from django_qless.views.data import histogram_bars


@pytest.mark.parametrize(("peak", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (10, 10),
                                           (11, 20), (230, 500), (5001, 10000)])
def test_nice_top(peak: int, top: int) -> None:
    assert nice_top(peak) == top


def test_bars_are_drawn_against_the_round_top() -> None:
    chart = bar_chart([0, 7, 3], ["a", "b", "c"], width=300, height=114)
    assert chart["scale"]["top"] == 10
    assert [b["h"] for b in chart["bars"]] == [0.0, 70.0, 30.0]
    assert [g["value"] for g in chart["scale"]["lines"]] == [0, 5, 10]
    assert [g["y"] for g in chart["scale"]["lines"]] == [114.0, 64.0, 14.0]


def test_charts_page_labels_the_y_axis(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    job = qc.queues["q"].pop()
    job.complete()
    page = mc.get("/qless/charts/").content.decode()
    assert re.search(r'class="qless-tick qless-y-tick">1</text>', page)


@pytest.mark.browser
def test_browser_charts_show_y_ticks(page: Any, qc: Any) -> None:
    for _ in range(3):
        qc.queues["q"].put("tests.Job", {})
        qc.queues["q"].pop().complete()
    page.goto(f"{page.base}/qless/charts/")
    ticks = page.locator("#qless-chart-minute .qless-y-tick").all_text_contents()
    assert ticks == ["5"]  # (2.5 is not a whole number of jobs: no line for it)


def test_queue_histograms_are_drawn_against_the_round_top() -> None:
    chart = histogram_bars([7, 3] + [0] * 146, width=148, height=114)
    assert chart["scale"]["top"] == 10
    assert [b["h"] for b in chart["bars"][:3]] == [70.0, 30.0, 0.0]


@pytest.mark.browser
def test_browser_queue_histograms_show_y_ticks(page: Any, qc: Any) -> None:
    for _ in range(3):
        qc.queues["q"].put("tests.Job", {})
    for _ in range(3):
        qc.queues["q"].pop()
    page.goto(f"{page.base}/qless/queues/q/")
    wait_for = "svg[aria-label='Wait time histogram'] .qless-y-tick"
    assert page.locator(wait_for).all_text_contents() == ["5"]
    assert page.locator("svg[aria-label='Run time histogram'] .qless-y-tick").count() == 0


def test_overview_sparkline_labels_its_round_top(mc: Client, qc: Any) -> None:
    assert "qless-y-tick" not in mc.get("/qless/").content.decode()  # nothing completed yet
    from django_qless.core.client import Client as CoreClient

    when = float(qc.now()) - 90  # all three in one minute of the last hour
    at = CoreClient(qc.redis, worker_name="w1", _clock=lambda: when)
    for _ in range(3):
        at.queues["q"].put("tests.Job", {})
        at.queues["q"].pop().complete()
    page = mc.get("/qless/").content.decode()
    assert re.search(r'<line x1="0" y1="12\.0" x2="360" y2="12\.0" class="qless-grid"></line>'
                     r'<text [^>]*class="qless-tick qless-y-tick">5/min</text>', page)
    assert re.search(r'<rect x="\d+" y="24" width="5" height="18" class="qless-bar">', page)
