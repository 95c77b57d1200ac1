"""The Tags page shows how many jobs carry each top tag."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client


def test_top_tags_have_counts(mc: Client, qc: Any) -> None:
    for i in range(5):
        qc.queues["q"].put("tests.Job", {}, tags=["often", "<b>x</b>"] if i < 3 else ["often"])
    body = mc.get("/qless/tags/").content.decode()
    found = re.findall(r'>([^<]+)</a> <span class="qless-badge" data-tag-count[^>]*>(\d+)<', body)
    assert found == [("often", "5"), ("&lt;b&gt;x&lt;/b&gt;", "3")]


@pytest.mark.browser
def test_browser_tag_counts(page: Any, qc: Any) -> None:
    for _ in range(2):
        qc.queues["q"].put("tests.Job", {}, tags=["pair"])
    page.goto(f"{page.base}/qless/tags/")
    assert page.inner_text("ul.qless-tags li") == "pair 2"
