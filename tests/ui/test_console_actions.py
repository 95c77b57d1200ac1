"""Bulk actions on selected jobs, retry all failed, and the failed pages' counts and samples."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.ui.conftest import fail_job
from tests.ui.test_actions import texts, url


def bulk(mc: Client, action: str, jids: list[str], **extra: str) -> Any:
    return mc.post(url("jobs_bulk"), {"action": action, "jid": jids,
                                      "next": "/qless/queues/q/waiting/", **extra})


def test_bulk_retry_reports_refused_jids_and_goes_back(mc: Client, qc: Any) -> None:
    failed = [fail_job(qc), fail_job(qc)]
    waiting = qc.queues["q"].put("tests.Job", {})
    response = bulk(mc, "retry", [*failed, waiting, "missing-jid"])
    assert response.status_code == 302 and response["Location"] == "/qless/queues/q/waiting/"
    said = texts(response)
    assert said[0] == "Retried 2 jobs."
    assert said[1] == (f"2 jobs not retried: {waiting}: it is waiting, not failed; "
                       "missing-jid: it does not exist any more.")
    assert qc.jobs.failed() == {}


def test_bulk_move_priority_track_untrack_cancel(mc: Client, qc: Any) -> None:
    jids = [qc.queues["q"].put("tests.Job", {}) for _ in range(3)]
    assert texts(bulk(mc, "move", jids[:2], queue="other"))[-1] == "Moved 2 jobs to other."
    assert {qc.jobs[j].queue_name for j in jids[:2]} == {"other"}
    assert texts(bulk(mc, "priority", jids, priority="9"))[-1] == (
        "Reprioritized 3 jobs to priority 9.")
    assert {qc.jobs[j].priority for j in jids} == {9}
    assert texts(bulk(mc, "track", jids))[-1] == "Tracked 3 jobs."
    assert all(qc.jobs[j].tracked for j in jids)
    assert texts(bulk(mc, "untrack", jids[:1]))[-1] == "Untracked 1 job."
    assert texts(bulk(mc, "cancel", jids))[-1] == "Canceled 3 jobs."
    assert all(qc.jobs.get(j) is None for j in jids)


def test_bulk_cancel_refuses_a_job_others_depend_on(mc: Client, qc: Any) -> None:
    base = qc.queues["q"].put("tests.Job", {})
    child = qc.queues["q"].put("tests.Job", {}, depends=[base])
    said = texts(bulk(mc, "cancel", [base]))
    assert said == [f"1 job not canceled: {base}: other jobs depend on it ({child})."]
    assert qc.jobs.get(base) is not None


def test_bulk_bad_input_is_a_message_never_a_500(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    cases = [
        ({"action": "explode", "jid": [jid]}, "Choose what to do with the selected jobs."),
        ({"action": "cancel"}, "Select at least one job first."),
        ({"action": "move", "jid": [jid], "queue": "bad name!"}, "Nothing was changed: Queue: "),
        ({"action": "priority", "jid": [jid], "priority": "high"}, "Nothing was changed: "),
        ({"action": "retry", "jid": ["x" * 300]}, "Nothing was changed: "),
        ({"action": "track", "jid": [f"j{i}" for i in range(501)]}, "At most 500 jobs"),
    ]
    for data, expected in cases:
        response = mc.post(url("jobs_bulk"), data)
        assert response.status_code == 302, data
        assert texts(response)[-1].startswith(expected), (data, texts(response))
    assert qc.jobs[jid].queue_name == "q"


def test_retry_all_failed_confirms_and_is_capped(mc: Client, qc: Any,
                                                  monkeypatch: Any) -> None:
    from django_qless.views import failed as failed_views

    for group in ("a.Error", "b.Error", "b.Error"):
        fail_job(qc, group=group)
    page = mc.get(url("failed_retry_all")).content.decode()
    assert "Retry all 3 failed jobs of 2 failure groups?" in page
    monkeypatch.setattr(failed_views, "BULK_LIMIT", 2)
    response = mc.post(url("failed_retry_all"))
    assert texts(response) == ["Retried 2 failed jobs.",
                               "1 more failed job remains: run “Retry all” again."]
    response = mc.post(url("failed_retry_all"))
    assert texts(response)[-1] == "Retried 1 failed job."
    assert qc.jobs.failed() == {}
    assert texts(mc.post(url("failed_retry_all")))[-1] == (
        "There are no failed jobs: nothing to retry.")


def test_failed_page_counts_groups_and_jobs_and_shows_a_sample(mc: Client, qc: Any) -> None:
    fail_job(qc, group="a.Error", message="Traceback old\nValueError: old")
    newest = fail_job(qc, group="a.Error", message="Traceback new\nValueError: <newest>")
    fail_job(qc, group="b.Error")
    body = mc.get(url("failed")).content.decode()
    assert 'title="groups">2</span>' in body
    assert "<strong>3</strong> failed jobs in 2 groups." in body
    assert 'data-live-stale="total" data-live-initial="3" hidden' in body
    sample = body[body.index('data-group="a.Error"'):]
    sample = sample[:sample.index("</tr>")]
    assert newest in sample and "ValueError: &lt;newest&gt;" in sample and "<details" in sample
    assert mc.get(url("api_failed")).json()["group_count"] == 2
    group = mc.get(url("failed_group", "a.Error")).content.decode()
    assert "<th>Failed at</th><th>Message</th>" in group
    assert "<td>ValueError: old</td>" in group and "Newest failure:" in group
