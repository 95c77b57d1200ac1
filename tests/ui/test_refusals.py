"""Refused and no-op actions: back to the page they came from, in plain words, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tests.ui.conftest import fail_job, pop_job

HOST = "http://testserver"


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def last(response: Any) -> str:
    """Return the message this response added (unread earlier ones stay in the session)."""
    return texts(response)[-1]


def chain(qc: Any) -> tuple[str, str, str]:
    """a <- b <- c: b depends on a, c on b."""
    a = qc.queues["q"].put("tests.Job", {})
    b = qc.queues["q"].put("tests.Job", {}, depends=[a])
    c = qc.queues["q"].put("tests.Job", {}, depends=[b])
    return a, b, c


def test_refused_cancel_goes_back_to_the_referring_page_in_plain_words(mc: Client,
                                                                       qc: Any) -> None:
    a, b, c = chain(qc)
    came_from = HOST + url("job_cancel", a)
    response = mc.post(url("job_cancel", a), HTTP_REFERER=came_from)
    assert response.status_code == 302 and response["Location"] == came_from
    [message] = texts(response)
    assert message.startswith("This job can't be canceled on its own: 2 jobs depend on it (")
    assert b in message and c in message and "Cancel()" not in message
    assert qc.jobs.get(a) is not None


def test_refused_cancel_without_referer_goes_to_the_cancel_page(mc: Client, qc: Any) -> None:
    a, _, _ = chain(qc)
    response = mc.post(url("job_cancel", a))
    assert response["Location"] == url("job_cancel", a)
    page = mc.get(response["Location"]).content.decode()
    assert "can&#x27;t be canceled on its own: 2 jobs depend on it" in page
    assert 'name="with_dependents"' in page and "Yes, cancel it and its 2 dependents" in page


def test_cancel_with_dependents_cancels_the_whole_chain(mc: Client, qc: Any) -> None:
    a, b, c = chain(qc)
    other = qc.queues["q"].put("tests.Job", {})
    response = mc.post(url("job_cancel", a), {"with_dependents": "1"})
    assert response["Location"] == url("queue", "q")
    assert texts(response) == [f"Canceled job {a} and 2 jobs depending on it."]
    assert [qc.jobs.get(j) for j in (a, b, c)] == [None, None, None]
    assert qc.jobs.get(other) is not None


def test_job_page_offers_cancel_with_dependents(mc: Client, qc: Any) -> None:
    a, _, c = chain(qc)
    assert "Cancel with its dependents" in mc.get(url("job", a)).content.decode()
    assert "Cancel with its dependents" not in mc.get(url("job", c)).content.decode()


@pytest.mark.parametrize("referer", ["https://evil.example/qless/", "javascript:alert(1)",
                                     "//evil.example/x"])
def test_a_foreign_referer_is_ignored(mc: Client, qc: Any, referer: str) -> None:
    a, _, _ = chain(qc)
    response = mc.post(url("job_cancel", a), HTTP_REFERER=referer)
    assert response["Location"] == url("job_cancel", a)


def test_refused_config_stays_on_the_config_page(mc: Client, qc: Any) -> None:
    response = mc.post(url("config"), {"key": "heartbeat", "value": "banana"},
                       HTTP_REFERER=HOST + url("config"))
    assert response.status_code == 302 and response["Location"] == url("config")
    [message] = texts(response)
    assert message == ("Option heartbeat was not changed: config heartbeat must be an integer, "
                       "got 'banana'.")
    response = mc.post(url("config"), {"key": "max-job-history", "value": "2"})
    assert response["Location"] == url("config")
    assert "must be 0 (unlimited) or an integer from 3 to 10000" in last(response)
    response = mc.post(url("config"), {"key": "heartbeat", "value": "99999999999"})
    assert last(response) == ("Option heartbeat was not changed: config heartbeat must be an "
                              "integer from 1 to 604800 (seconds), got '99999999999'.")
    assert qc.config["heartbeat"] == 60 and "max-job-history" not in qc.config.all


def test_engine_refusal_outside_a_form_goes_to_the_object_page(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    qc.queues["q"].put("tests.Job", {}, jid="x", depends=[jid])
    # An undepend on a job not in `depends` is refused by the engine, not by a form.
    response = mc.post(url("job_undepend", jid), {"dependency": "x"})
    assert response["Location"] == url("job", jid)


def test_unknown_config_key_is_stored_with_a_warning(mc: Client, qc: Any) -> None:
    response = mc.post(url("config"), {"key": "heartbeats", "value": "5"})
    [message] = get_messages(response.wsgi_request)
    assert message.level_tag == "warning" and "not an option the engine knows" in str(message)
    page = mc.get(url("config")).content.decode()
    assert "not an engine option" in page
    ok = mc.post(url("config"), {"key": "emails-heartbeat", "value": "5"})
    [message] = get_messages(ok.wsgi_request)
    assert message.level_tag == "success"


def test_no_op_messages_say_nothing_changed(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {}, tags=["t"])
    assert last(mc.post(url("job_untag", jid), {"tag": "not-there"})) == \
        f"Job {jid} has no tag not-there: nothing to remove."
    assert last(mc.post(url("job_tag", jid), {"tag": "t"})) == f"Job {jid} already has tag t."
    assert last(mc.post(url("job_untrack", jid))) == f"Job {jid} is not tracked: nothing to stop."
    qc.jobs[jid].track()
    assert last(mc.post(url("job_track", jid))) == f"Job {jid} is already tracked."
    assert last(mc.post(url("config_unset"), {"key": "nonexistent"})) == \
        "Option nonexistent is not set: nothing to reset."
    assert last(mc.post(url("job_untag", jid), {"tag": "t"})) == f"Removed tag t from {jid}."


def completed(qc: Any) -> str:
    jid = qc.queues["q"].put("tests.Job", {}, priority=3)
    pop_job(qc).complete()
    return jid


def test_priority_and_move_are_refused_for_a_completed_job(mc: Client, qc: Any) -> None:
    jid = completed(qc)
    response = mc.post(url("job_priority", jid), {"priority": "25"})
    assert response["Location"] == url("job", jid)
    assert "is complete: a priority only orders jobs" in texts(response)[0]
    response = mc.post(url("job_move", jid), {"queue": "other"})
    assert "so it can't be moved" in last(response)
    job = qc.jobs[jid]
    assert (job.state, job.priority, job.queue_name) == ("complete", 3, "")


@pytest.mark.parametrize("state", ["waiting", "scheduled", "depends", "stalled"])
def test_priority_applies_to_jobs_still_to_run(mc: Client, qc: Any, state: str) -> None:
    if state == "waiting":
        jid = qc.queues["q"].put("tests.Job", {})
    elif state == "scheduled":
        jid = qc.queues["q"].put("tests.Job", {}, delay=600)
    elif state == "depends":
        jid = qc.queues["q"].put("tests.Job", {}, depends=[qc.queues["q"].put("tests.Job", {})])
    else:
        jid = qc.queues["q"].put("tests.Job", {}, priority=100)
        pop_job(qc).timeout()
    assert qc.jobs[jid].state == state
    assert "Set priority" in mc.get(url("job", jid)).content.decode()
    mc.post(url("job_priority", jid), {"priority": "9"})
    assert qc.jobs[jid].priority == 9


def test_completed_job_page_hides_priority_and_move(mc: Client, qc: Any) -> None:
    page = mc.get(url("job", completed(qc))).content.decode()
    assert "Set priority" not in page and "Move to queue" not in page
    failed = mc.get(url("job", fail_job(qc))).content.decode()
    assert "Move to queue" in failed and "Set priority" not in failed


def test_queue_settings_explain_concurrency_and_throttle(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    page = mc.get(url("queue", "q")).content.decode()
    assert "How many jobs of this queue may run at the same time, across all workers" in page
    assert "named limit on running jobs that several queues and jobs can share" in page


def test_job_summary_is_small_and_versioned(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {"blob": "x" * 900_000})
    first = mc.get(url("api_job_summary", jid))
    assert first.status_code == 200 and len(first.content) < 2048
    summary = first.json()
    assert (summary["state"], summary["queue"], summary["history_count"]) == ("waiting", "q", 1)
    assert mc.get(url("api_job_summary", jid)).json()["version"] == summary["version"]
    qc.jobs[jid].tag("new")  # nothing in the summary's fields but the page changes
    assert mc.get(url("api_job_summary", jid)).json()["version"] != summary["version"]
    assert mc.get(url("api_job_summary", "missing")).status_code == 404


def test_unchanged_priority_and_recurring_settings_say_so(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {}, priority=7)
    assert last(mc.post(url("job_priority", jid), {"priority": "7"})) == \
        f"Priority of {jid} is already 7: nothing changed."
    qc.queues["q"].recur("tests.Job", {}, 60, jid="every", priority=2, retries=3, tags=["a"])
    same = {"interval": "60", "priority": "2", "retries": "3", "tags": "a"}
    assert last(mc.post(url("recurring_detail", "every"), same)) == \
        "Recurring job every already has these settings: nothing changed."
    assert last(mc.post(url("recurring_detail", "every"), {**same, "tags": "a, b"})) == \
        "Updated recurring job every."


def test_dependent_added_during_a_cascade_cancels_nothing(mc: Client, qc: Any,
                                                          monkeypatch: Any) -> None:
    from django_qless.core.jobs import Jobs

    a, b, c = chain(qc)
    real = Jobs.dependents_closure

    def closure_then_race(self: Jobs, jid: str, limit: int = 500) -> list[str]:
        found = real(self, jid, limit)
        qc.queues["q"].put("tests.Job", {}, jid="late", depends=[jid])  # someone, meanwhile
        return found

    monkeypatch.setattr(Jobs, "dependents_closure", closure_then_race)
    response = mc.post(url("job_cancel", a), {"with_dependents": "1"})
    assert response["Location"] == url("job_cancel", a)
    assert last(response).startswith("More jobs started to depend on this one meanwhile")
    assert all(qc.jobs.get(j) is not None for j in (a, b, c, "late"))


def test_requeue_and_move_of_a_completed_job_say_the_same_true_thing(mc: Client,
                                                                      qc: Any) -> None:
    jid = completed(qc)
    requeue = last(mc.post(url("job_retry", jid)))
    move = last(mc.post(url("job_move", jid), {"queue": "other"}))
    for text, done in ((requeue, "requeued"), (move, "moved")):
        assert text == (f"Job {jid} is complete: it already ran, and a completed job is kept "
                        f"only as a record, in no queue, so it can't be {done}. To run it "
                        f"again, enqueue a new job.")
        assert "move it" not in text
    assert qc.jobs[jid].state == "complete"


def test_forgetting_an_unknown_worker_says_so(mc: Client, qc: Any) -> None:
    response = mc.post(url("worker_forget", "w-never"))
    assert response["Location"] == url("workers")
    assert last(response) == ("Worker w-never is not known (already forgotten, or never "
                              "registered): nothing to forget.")
    response = mc.get(url("worker_forget", "w-never"))
    assert response.status_code == 302 and "nothing to forget" in last(response)
    qc.workers.hello("w-real", "h", 1, ["q"])
    assert last(mc.post(url("worker_forget", "w-real"))).startswith("Forgot worker w-real.")


def test_resetting_an_option_at_its_default_says_nothing_changed(mc: Client, qc: Any) -> None:
    assert last(mc.post(url("config_unset"), {"key": "grace-period"})) == \
        "Option grace-period is already at its default (10): nothing to reset."
    qc.config["grace-period"] = 30
    assert last(mc.post(url("config_unset"), {"key": "grace-period"})) == \
        "Reset option grace-period to its default (10)."
    assert qc.config["grace-period"] == 10
    qc.config["q-heartbeat"] = 30
    assert last(mc.post(url("config_unset"), {"key": "q-heartbeat"})) == \
        "Unset option q-heartbeat: the engine no longer reads a value."


def test_refusals_keep_the_spelling_of_names(mc: Client, qc: Any) -> None:
    from django_qless.core.exceptions import InvalidArgument
    from django_qless.views.base import plain_error

    assert plain_error(InvalidArgument("grace-period must be an integer")) == \
        "grace-period must be an integer."
    assert plain_error(InvalidArgument("heartbeat is too long")) == "heartbeat is too long."
    assert plain_error(InvalidArgument("q.high is paused")) == "q.high is paused."
    assert plain_error(InvalidArgument("priority must be an integer")) == \
        "Priority must be an integer."


@pytest.mark.parametrize("tid", ["a b", "café", "naïve-limit"])
def test_throttle_ids_the_engine_refuses_are_explained_in_the_form(mc: Client, qc: Any,
                                                                   tid: str) -> None:
    response = mc.post(url("throttles"), {"id": tid, "maximum": "2"})
    text = last(response)
    assert text == (f"Throttle id: {tid!r} is not a throttle id: use 1 to 128 ASCII letters, "
                    "digits or punctuation such as - _ . : (no spaces, no accented or other "
                    "non-ASCII letters).")
    assert "invalid throttle id" not in text and "Arg" not in text
    response = mc.get(url("throttles"), {"id": tid})
    assert response.status_code == 200 and "is not a throttle id" in texts(response)[-1]
