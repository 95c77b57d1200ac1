"""Every dashboard action: POST, then redirect with a message; bad values never 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tests.ui.conftest import fail_job, pop_job


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_pause_and_unpause(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    response = mc.post(url("queue_pause", "q"))
    assert response.status_code == 302 and response["Location"] == url("queue", "q")
    assert qc.queues["q"].paused
    assert "Paused queue q." in texts(response)
    assert mc.post(url("queue_unpause", "q")).status_code == 302
    assert not qc.queues["q"].paused


def test_pause_is_post_only(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    assert mc.get(url("queue_pause", "q")).status_code == 405
    assert not qc.queues["q"].paused


def test_unknown_queue_is_404(mc: Client, qc: Any) -> None:
    assert mc.get(url("queue", "nope")).status_code == 404
    assert mc.post(url("queue_pause", "nope")).status_code == 404
    assert "nope" not in qc.queues.names()


def test_queue_settings(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    response = mc.post(url("queue_settings", "q"),
                       {"heartbeat": "45", "max_concurrency": "3", "throttle": "2"})
    assert response.status_code == 302
    assert qc.queues["q"].heartbeat == 45
    assert qc.config["q-max-concurrency"] == 3
    assert qc.throttles["ql:q:q"].maximum == 2
    page = mc.get(url("queue", "q")).content.decode()
    assert 'value="45"' in page


def test_queue_settings_bad_value_is_a_message(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    response = mc.post(url("queue_settings", "q"), {"heartbeat": "0"})
    assert response.status_code == 302
    assert any("Heartbeat" in t for t in texts(response))
    assert qc.queues["q"].heartbeat == 60


def test_cancel_asks_then_cancels(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    confirm = mc.get(url("job_cancel", jid))
    assert confirm.status_code == 200 and b"Yes, cancel the job" in confirm.content
    assert qc.jobs.get(jid) is not None
    done = mc.post(url("job_cancel", jid))
    assert done.status_code == 302 and done["Location"] == url("queue", "q")
    assert qc.jobs.get(jid) is None


def test_cancel_refused_is_a_message(mc: Client, qc: Any) -> None:
    first = qc.queues["q"].put("tests.Job", {})
    qc.queues["q"].put("tests.Job", {}, depends=[first])
    response = mc.post(url("job_cancel", first))
    assert response.status_code == 302
    assert texts(response) and qc.jobs.get(first) is not None


def test_retry_failed_job(mc: Client, qc: Any) -> None:
    jid = fail_job(qc)
    response = mc.post(url("job_retry", jid))
    assert response.status_code == 302 and response["Location"] == url("job", jid)
    assert qc.jobs[jid].state == "waiting"
    assert qc.jobs.failed() == {}


def test_move_to_other_queue_and_bad_name(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    assert mc.post(url("job_move", jid), {"queue": "other"}).status_code == 302
    assert qc.jobs[jid].queue_name == "other"
    bad = mc.post(url("job_move", jid), {"queue": "no spaces!"})
    assert bad.status_code == 302
    assert any("Queue names" in t for t in texts(bad))
    assert qc.jobs[jid].queue_name == "other"


@pytest.mark.parametrize("value,expected", [("25", 25), ("-25", -25), ("0", 0), ("1234", 1234)])
def test_priority_presets_and_free_value(mc: Client, qc: Any, value: str, expected: int) -> None:
    jid = qc.queues["q"].put("tests.Job", {}, priority=7)
    assert mc.post(url("job_priority", jid), {"priority": value}).status_code == 302
    assert qc.jobs[jid].priority == expected


@pytest.mark.parametrize("value", ["high", "1e3", "", "99999999999", "1.5"])
def test_priority_bad_values_are_friendly(mc: Client, qc: Any, value: str) -> None:
    jid = qc.queues["q"].put("tests.Job", {}, priority=7)
    response = mc.post(url("job_priority", jid), {"priority": value}, follow=True)
    assert response.status_code == 200
    assert b"Priority:" in response.content  # the message names the field
    assert qc.jobs[jid].priority == 7


def test_track_untrack_tag_untag(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {}, tags=["a"])
    mc.post(url("job_track", jid))
    assert qc.jobs[jid].tracked
    mc.post(url("job_untrack", jid))
    assert not qc.jobs[jid].tracked
    mc.post(url("job_tag", jid), {"tag": "b"})
    assert set(qc.jobs[jid].tags) == {"a", "b"}
    mc.post(url("job_untag", jid), {"tag": "a"})
    assert qc.jobs[jid].tags == ("b",)
    empty = mc.post(url("job_tag", jid), {"tag": "   "})
    assert any("Tag" in t for t in texts(empty))


def test_timeout_running_job_only(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    refused = mc.post(url("job_timeout", jid))
    assert any("not running" in t for t in texts(refused))
    pop_job(qc)
    assert qc.jobs[jid].state == "running"
    mc.post(url("job_timeout", jid))
    assert qc.jobs[jid].state != "running"


def test_undepend(mc: Client, qc: Any) -> None:
    first = qc.queues["q"].put("tests.Job", {})
    second = qc.queues["q"].put("tests.Job", {}, depends=[first])
    page = mc.get(url("job", second)).content.decode()
    assert url("job", first) in page
    mc.post(url("job_undepend", second), {"dependency": first})
    assert qc.jobs[second].state == "waiting"
    bad = mc.post(url("job_undepend", second), {"dependency": "no/jid"})
    assert any("jid" in t for t in texts(bad))


def test_missing_job_is_404_everywhere(mc: Client, qc: Any) -> None:
    for name in ("job", "job_cancel"):
        response = mc.get(url(name, "missing-jid"))
        assert response.status_code == 404
        assert b"does not exist" in response.content
    assert mc.post(url("job_retry", "missing-jid")).status_code == 404
    assert mc.get(url("api_job", "missing-jid")).status_code == 404


@pytest.mark.parametrize("path", ["/qless/jobs/bad$jid/", "/qless/jobs/x-history/",
                                  "/qless/queues/bad%20name/", "/qless/queues/q/finished/",
                                  "/qless/jobs/" + "a" * 65 + "/",
                                  "/qless/tags/" + "t" * 65])
def test_invalid_names_are_404(mc: Client, path: str) -> None:
    assert mc.get(path).status_code == 404


def test_failed_retry_all_confirms_then_acts(mc: Client, qc: Any) -> None:
    jids = [fail_job(qc, "q"), fail_job(qc, "q2")]
    confirm = mc.get(url("failed_retry", "boom.Error"))
    body = confirm.content.decode()
    assert confirm.status_code == 200
    assert "Retry 2 of the 2 failed jobs" in body and "1 from queue q2" in body
    assert qc.jobs.failed() == {"boom.Error": 2}
    done = mc.post(url("failed_retry", "boom.Error"))
    assert done.status_code == 302 and done["Location"] == url("failed")
    assert "Retried 2 jobs of group boom.Error." in texts(done)
    assert [qc.jobs[j].state for j in jids] == ["waiting", "waiting"]
    assert qc.jobs[jids[1]].queue_name == "q2"


def test_failed_cancel_all(mc: Client, qc: Any) -> None:
    jids = [fail_job(qc), fail_job(qc)]
    assert mc.get(url("failed_cancel", "boom.Error")).status_code == 200
    mc.post(url("failed_cancel", "boom.Error"))
    assert qc.jobs.get_many(*jids) == []
    assert qc.jobs.failed() == {}


def test_bulk_is_capped_at_500(mc: Client, qc: Any) -> None:
    queue = qc.queues["bulk"]
    jids = queue.put_many([{"klass": "tests.Job", "data": {}} for _ in range(503)])
    from django_qless.core.client import Client as CoreClient

    popper = CoreClient(qc.redis, worker_name="w1")
    popped = popper.queues["bulk"].pop(503)
    assert len(popped) == 503
    popper.pipeline_calls([("fail", (j.jid, "w1", "many", "boom", "{}")) for j in popped])
    assert qc.jobs.failed() == {"many": 503}
    confirm = mc.get(url("failed_retry", "many")).content.decode()
    assert "Retry 500 of the 503 failed jobs" in confirm and "at most 500" in confirm
    done = mc.post(url("failed_retry", "many"))
    assert done["Location"] == url("failed_group", "many")
    assert qc.jobs.failed() == {"many": 3}
    assert len(jids) == 503


def test_bulk_on_empty_group_redirects(mc: Client, qc: Any) -> None:
    response = mc.post(url("failed_retry", "nothing"))
    assert response.status_code == 302 and response["Location"] == url("failed")


def test_recurring_edit_and_cancel(mc: Client, qc: Any) -> None:
    qc.queues["q"].recur("tests.Job", {"x": 1}, 60, jid="every", tags=["old"])
    page = mc.get(url("recurring_detail", "every"))
    assert page.status_code == 200 and b"every" in page.content
    response = mc.post(url("recurring_detail", "every"),
                       {"interval": "120", "priority": "5", "retries": "2", "tags": "new, two"})
    assert response.status_code == 302
    rj = qc.jobs.recurring("every")
    assert (rj.interval, rj.priority, rj.retries, set(rj.tags)) == (120, 5, 2, {"new", "two"})
    bad = mc.post(url("recurring_detail", "every"),
                  {"interval": "0", "priority": "5", "retries": "2", "tags": ""})
    assert any("Interval" in t for t in texts(bad))
    assert qc.jobs.recurring("every").interval == 120
    assert mc.get(url("recurring_cancel", "every")).status_code == 200
    mc.post(url("recurring_cancel", "every"))
    assert qc.jobs.recurring("every") is None
    assert mc.get(url("recurring_detail", "every")).status_code == 404


def test_config_set_unset_and_bad_value(mc: Client, qc: Any) -> None:
    mc.post(url("config"), {"key": "heartbeat", "value": "90"})
    assert qc.config["heartbeat"] == 90
    bad = mc.post(url("config"), {"key": "heartbeat", "value": "zero"})
    assert bad.status_code == 302 and texts(bad)
    assert qc.config["heartbeat"] == 90
    mc.post(url("config_unset"), {"key": "heartbeat"})
    assert qc.config["heartbeat"] == 60
    page = mc.get(url("config")).content.decode()
    assert "grace-period" in page


def test_throttle_set_lookup_delete(mc: Client, qc: Any) -> None:
    response = mc.post(url("throttles"), {"id": "api/calls", "maximum": "4", "ttl": ""})
    assert response.status_code == 302
    assert qc.throttles["api/calls"].maximum == 4
    page = mc.get(url("throttles") + "?id=api/calls").content.decode()
    assert "api/calls" in page and ">4<" in page
    bad = mc.post(url("throttles"), {"id": "x", "maximum": "-1"})
    assert texts(bad)
    mc.post(url("throttle_delete", "api/calls"))
    assert qc.throttles["api/calls"].ttl == -2


@pytest.mark.parametrize("target,expected", [
    ("https://evil.example/", None),
    ("//evil.example/x", None),
    ("javascript:alert(1)", None),
    ("/qless/failed/", "/qless/failed/"),
])
def test_next_is_checked(mc: Client, qc: Any, target: str, expected: str | None) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    response = mc.post(url("job_track", jid), {"next": target})
    assert response["Location"] == (expected or url("job", jid))


def test_actions_write_an_audit_log(mc: Client, qc: Any, caplog: Any) -> None:
    fail_job(qc)
    with caplog.at_level("INFO", logger="django_qless"):
        mc.post(url("failed_cancel", "boom.Error"))
    assert any("manager" in r.getMessage() and "cancel" in r.getMessage()
               for r in caplog.records)


def test_redis_down_is_a_503_page(mc: Client, settings: Any) -> None:
    from django_qless.clients import clients

    clients.close_all()
    settings.QLESS = {"default": {"URL": "unix:///nonexistent/redis.sock"}}
    clients.close_all()
    response = mc.get(url("overview"))
    assert response.status_code == 503
    assert b"cannot be reached" in response.content
    clients.close_all()
