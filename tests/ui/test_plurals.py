"""Counts of one read in the singular on every page and command line; durations drop zeros."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_qless.conf.model import AliasSettings, ClusterSettings
from django_qless.core.audit.auditor import AuditReport
from django_qless.core.client import Client as CoreClient
from django_qless.templatetags.qless_tags import duration
from django_qless.urls import urlpatterns
from tests.ui.conftest import fail_job
from tests.ui.test_access import PAGE_NAMES, url_for

# A count of one followed by a plural noun ("1 jobs", "1 more failed jobs", "1 children").
ONE_PLURAL = re.compile(
    r"(?<![\d.,])1 (?:more )?(?:failed |waiting |running )?"
    r"(?:jobs|workers|queues|groups|shards|entries|children|dependents|members|tags|"
    r"throttles|changes|keys|violations|signals|steps|matches|templates|failures|retries)\b")


@pytest.fixture
def one_of_everything(qc: Any) -> dict[str, str]:
    """One waiting job (with a dependent), one failed, one recurring, one throttle, one done."""
    jid = qc.queues["q"].put("tests.Job", {"n": 1}, tags=["t1"])
    qc.queues["q"].put("tests.Job", {}, depends=[jid])
    failed = fail_job(qc, "q2", tags=("t1",))
    recur = qc.queues["q"].recur("tests.Job", {}, 60, jid="rec1")
    qc.queues["q3"].put("tests.Job", {})
    CoreClient(qc.redis, worker_name="w1").queues["q3"].pop().complete()
    qc.throttles["th1"].set(1)
    return {"jid": jid, "failed": failed, "recur": recur}


def test_no_page_says_one_with_a_plural(mc: Client, one_of_everything: dict[str, str]) -> None:
    gets = [p.name for p in urlpatterns if p.name in PAGE_NAMES]
    seen = 0
    for name in gets:
        response = mc.get(url_for(name, one_of_everything))
        if response.status_code != 200:
            continue
        seen += 1
        text = re.sub(r"<[^>]+>", " ", response.content.decode())
        text = re.sub(r"\s+", " ", text)
        assert not ONE_PLURAL.search(text), (name, ONE_PLURAL.search(text))
    assert seen >= 20
    overview = mc.get(reverse("django_qless:overview")).content.decode()
    assert re.search(r"Completed in the last hour: <strong[^>]*>1</strong>", overview)


def test_messages_count_one_in_the_singular(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    reply = mc.post(reverse("django_qless:jobs_bulk"),
                    {"jid": [jid], "action": "cancel", "next": "/qless/"}, follow=True)
    assert "Canceled 1 job." in reply.content.decode()


def test_command_line_texts_count_one_in_the_singular() -> None:
    report = AuditReport(jobs=1, keys=1)
    assert str(report).startswith("audit: 1 job, 1 key, 0 violations")
    alias = AliasSettings(alias="default", url=None, cluster=ClusterSettings(
        nodes=("redis://h:7000",), shards=1))
    assert "(cluster, 1 shard)" in alias.display


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0.00s"), (0.25, "0.25s"), (5, "5s"), (5.5, "5.50s"), (12, "12s"), (300, "5m"),
    (301, "5m 1s"), (3600, "1h"), (3660, "1h 1m"), (86400, "1d"), (90000, "1d 1h"),
    (-300, "-5m")])
def test_durations_leave_out_zero_parts(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_recurring_page_says_every_5m(mc: Client, qc: Any) -> None:
    qc.queues["q"].recur("tests.Job", {}, 300, offset=300)
    assert "<td>5m</td>" in mc.get("/qless/recurring/").content.decode()
