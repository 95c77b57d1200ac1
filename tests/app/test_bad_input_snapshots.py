"""Bad input: the layers tests/ui and tests/core cover without a DUMP check: dashboard forms and
the core client.

tests/ui checks that the one field it edits is unchanged and tests/core/test_client_* checks
an empty database or the job's state; here the same refusals run on a populated database
and every key must DUMP the same before and after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client as WebClient
from django.urls import reverse

from django_qless.clients import get_client
from django_qless.core import Client
from django_qless.core.exceptions import (
    DependencyError,
    InvalidArgument,
    JobNotFound,
    LimitExceeded,
    LostLockError,
)
from tests.app.bad_input import ADD, populate
from tests.core.conftest import snapshot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def populated(r: redis.Redis) -> None:
    """A waiting job, a dependency pair, a recurring job, a failed job and a throttle."""
    populate(get_client())
    assert r.dbsize() > 10


# -- dashboard forms -----------------------------------------------------------------------

UI_CASES: list[Any] = [
    pytest.param("job_priority", "exists", {"priority": "high"}, "Priority", id="c1-priority"),
    pytest.param("job_priority", "exists", {"priority": "nan"}, "Priority", id="c2-priority"),
    pytest.param("job_priority", "exists", {"priority": "1.5"}, "Priority", id="c3-priority"),
    pytest.param("job_priority", "exists", {"priority": "99999999999"}, "Priority",
                 id="c4-priority"),
    pytest.param("job_undepend", "child", {"dependency": "no/jid"}, "jid", id="c18-jid"),
    pytest.param("job_move", "exists", {"queue": ""}, "Queue", id="c19-queue"),
    pytest.param("job_move", "exists", {"queue": "<script>"}, "Queue names", id="c20-queue"),
    pytest.param("job_move", "exists", {"queue": "a\x00b"}, "Queue", id="c50-queue-NUL"),
    pytest.param("job_tag", "exists", {"tag": "   "}, "Tag", id="c39-tag-empty"),
    pytest.param("job_tag", "exists", {"tag": "t" * 65}, "Tag", id="c39-tag-long"),
    pytest.param("job_tag", "exists", {"tag": "a\x01"}, "Tag", id="c39-tag-control"),
    pytest.param("job_cancel", "parent", {}, "child", id="c37-cancel"),
    *[pytest.param("recurring_detail", "nightly",
                   {"interval": v, "priority": "0", "retries": "1", "tags": ""}, "Interval",
                   id=f"c40-42-interval={v}") for v in ("0", "-5", "nan", "0.001", "1e9")],
    pytest.param("recurring_detail", "nightly",
                 {"interval": "60", "priority": "0", "retries": "-1", "tags": ""}, "Retries",
                 id="c8-retries"),
    pytest.param("recurring_detail", "nightly",
                 {"interval": "60", "priority": "0", "retries": "1001", "tags": ""}, "Retries",
                 id="c9-retries"),
    pytest.param("recurring_detail", "nightly",
                 {"interval": "60", "priority": "high", "retries": "1", "tags": ""}, "Priority",
                 id="c1-recurring-priority"),
    pytest.param("config", None, {"key": "heartbeat", "value": "0"}, "heartbeat",
                 id="c47-heartbeat=0"),
    pytest.param("config", None, {"key": "heartbeat", "value": "nan"}, "heartbeat",
                 id="c47-heartbeat=nan"),
    pytest.param("config", None, {"key": "grace-period", "value": "-1"}, "grace-period",
                 id="c47-grace=-1"),
    pytest.param("queue_settings", "default", {"heartbeat": "0"}, "Heartbeat",
                 id="c47-queue-heartbeat"),
    pytest.param("throttles", None, {"id": "t", "maximum": "-1"}, "aximum", id="c51-max=-1"),
    pytest.param("throttles", None, {"id": "t", "maximum": "nan"}, "aximum", id="c51-max=nan"),
]


@pytest.fixture
def manager_client(db: None) -> WebClient:
    """A Django test client logged in as staff allowed to manage jobs."""
    user = User.objects.create_user("ops", "ops@example.com", None, is_staff=True)
    for codename in ("view_dashboard", "manage_jobs"):
        user.user_permissions.add(Permission.objects.get(
            content_type__app_label="django_qless", codename=codename))
    web = WebClient()
    web.force_login(user)
    return web


@pytest.mark.parametrize("view,arg,form,needle", UI_CASES)
def test_dashboard_form_refuses_and_writes_nothing(populated: None, r: redis.Redis,
                                                   manager_client: WebClient, view: str,
                                                   arg: str | None, form: dict[str, str],
                                                   needle: str) -> None:
    """A refused action redirects with a message naming the field; Redis unchanged."""
    before = snapshot(r)
    url = reverse(f"django_qless:{view}", args=[arg] if arg else [])
    response = manager_client.post(url, form)
    assert response.status_code == 302
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(needle in t for t in texts), texts
    assert snapshot(r) == before


@pytest.mark.parametrize("path", ["/qless/jobs/nope/", "/qless/jobs/a:b/",
                                  "/qless/jobs/exists-history/", "/qless/queues/nope/",
                                  "/qless/queues/%3Cscript%3E/", "/qless/recurring/nope/"])
def test_dashboard_unknown_or_invalid_names_are_404(populated: None, r: redis.Redis,
                                                    manager_client: WebClient,
                                                    path: str) -> None:
    """Bad-input cases 18, 20-22 in a URL: 404, nothing written."""
    before = snapshot(r)
    assert manager_client.get(path).status_code == 404
    assert snapshot(r) == before


# -- the core client: rows tests/core/test_client_validation.py has no case for -----------

def running(client: Client) -> Any:
    """Put and pop a job in its own queue as worker w1."""
    client.queues["run"].put(ADD, {"args": [1], "kwargs": {}}, jid="run")
    job = client.queues["run"].pop()
    assert job is not None
    return job


def done(client: Client) -> Any:
    """A job w1 completed (the Job object, so a second complete uses the same token)."""
    client.queues["fin"].put(ADD, {"args": [1], "kwargs": {}}, jid="done")
    job = client.queues["fin"].pop()
    assert job is not None
    job.complete()
    return job


CLIENT_CASES: list[Any] = [
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, {}, priority=float("nan")),
                 InvalidArgument, r"^priority must be an integer, got nan$", id="c2"),
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, {}, retries="5.5"),
                 InvalidArgument, r"^retries must be an integer, got '5\.5'$", id="c9"),
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, "{bad"), InvalidArgument,
                 r"^data must be a JSON object \(dict\), got str$", id="c10"),
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, None), InvalidArgument,
                 r"^data must be a JSON object \(dict\), got NoneType$", id="c11"),
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, {}, jid="nightly-3"),
                 InvalidArgument, r"^Put\(\): Job nightly-3 collides with recurring job nightly$",
                 id="c17"),
    pytest.param(lambda c, w, job: c.queues[""], InvalidArgument,
                 r"^queue must be a non-empty string, got ''$", id="c19"),
    pytest.param(lambda c, w, job: c.jobs["nope"], JobNotFound, r"^Job nope does not exist$",
                 id="c22-get"),
    pytest.param(lambda c, w, job: c.call("priority", "nope", 1), JobNotFound,
                 r"^Priority\(\): Job nope does not exist$", id="c22-priority"),
    pytest.param(lambda c, w, job: w.jobs["run"].complete(), LostLockError,
                 r"^Complete\(\): Job run has been handed out to another worker: w1$",
                 id="c23"),
    pytest.param(lambda c, w, job: w.jobs["run"].heartbeat(), LostLockError,
                 r"^Heartbeat\(\): Job run given out to another worker: w1$", id="c26"),
    pytest.param(lambda c, w, job: c.jobs["exists"].fail("g", "m"), LostLockError,
                 r"^Fail\(\): Job exists not currently running: waiting$", id="c29"),
    pytest.param(lambda c, w, job: job.fail("g" * 257, "m"), InvalidArgument,
                 r"^group must be at most 256 bytes", id="c30"),
    pytest.param(lambda c, w, job: job.retry(delay=float("nan")), InvalidArgument,
                 r"^delay must be finite, got nan$", id="c31"),
    pytest.param(lambda c, w, job: job.complete(delay=5), InvalidArgument,
                 r"^delay and depends need next", id="c36"),
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, {}, jid="parent",
                                                           depends=["child"]),
                 InvalidArgument, r"dependency cycle: parent would wait for itself$", id="c34"),
    pytest.param(lambda c, w, job: c.jobs["parent"].cancel(), DependencyError,
                 r"^Cancel\(\): parent is a dependency of child", id="c37"),
    pytest.param(lambda c, w, job: c.queues["default"].recur(ADD, {}, 0.001), InvalidArgument,
                 r"^interval must be >= 1, got 0\.001$", id="c42"),
    pytest.param(lambda c, w, job: c.queues["default"].recur(ADD, {}, 60, offset=-1),
                 InvalidArgument, r"^offset must be >= 0, got -1$", id="c44"),
    pytest.param(lambda c, w, job: c.queues["a\x00b"], InvalidArgument,
                 r"^queue may only contain A-Z a-z 0-9 _ \. -", id="c50"),
    pytest.param(lambda c, w, job: c.throttles["t"].set(float("nan")), InvalidArgument,
                 r"^maximum must be an integer, got nan$", id="c51-nan"),
    pytest.param(lambda c, w, job: c.throttles["t"].set(1.5), InvalidArgument,
                 r"^maximum must be an integer, got 1\.5$", id="c51-float"),
    pytest.param(lambda c, w, job: c.queues["default"].put(ADD, {}, depends=[f"d{n}" for n in
                                                                     range(1001)]),
                 LimitExceeded, r"^depends has 1001 items", id="c35"),
]


@pytest.mark.parametrize("call,cls,match", CLIENT_CASES)
def test_core_client_refuses_and_writes_nothing(
        populated: None, r: redis.Redis, redis_url: str,
        call: Callable[[Client, Client, Any], object], cls: type[Exception],
        match: str) -> None:
    """The typed error with the engine's or the checker's message; Redis unchanged."""
    client = Client(redis_url, worker_name="w1")
    thief = Client(redis_url, worker_name="w2")
    try:
        job = running(client)
        before = snapshot(r)
        with pytest.raises(cls, match=match):
            call(client, thief, job)
        assert snapshot(r) == before
    finally:
        client.close()
        thief.close()


def test_second_complete_with_the_same_token_returns_the_first_result(
        populated: None, r: redis.Redis, redis_url: str) -> None:
    """Case 25: a repeated complete (same attempt) answers "complete" again, writes nothing."""
    client = Client(redis_url, worker_name="w1")
    try:
        job = done(client)
        before = snapshot(r)
        assert job.complete() == "complete"
        assert snapshot(r) == before
    finally:
        client.close()
