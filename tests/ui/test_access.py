"""Who may see and do what: every URL, anonymous / plain / staff without perm / viewer."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, reverse

from django_qless.urls import urlpatterns
from django_qless.views.base import CSP
from django_qless.views.converters import CONVERTERS
from tests.ui.conftest import TOKEN, fail_job

SAMPLE_ARGS = {
    "qless_queue": "q",
    "qless_jid": "JID",
    "qless_state": "waiting",
    "qless_worker": "w1",
    "qless_tag": "t1",
    "qless_group": "boom.Error",
    "qless_throttle": "th1",
    "qless_flow": "fl0123456789abcdef01234567.3",
}
API_NAMES = {p.name for p in urlpatterns if p.name and (p.name.startswith("api_")
                                                      or p.name == "metrics")}
PAGE_NAMES = sorted(p.name for p in urlpatterns if p.name and p.name not in API_NAMES)


def _args(pattern: URLPattern, jid: str) -> list[str]:
    args = []
    for name, converter in pattern.pattern.converters.items():
        kind = next(k for k, cls in CONVERTERS.items() if isinstance(converter, cls))
        args.append(jid if name == "jid" else SAMPLE_ARGS[kind])
    return args


@pytest.fixture
def world(qc: Any) -> dict[str, str]:
    """A queue with a waiting job, a failed job and a recurring job."""
    jid = qc.queues["q"].put("tests.Job", {"n": 1}, tags=["t1", "t2"])
    failed = fail_job(qc, "q", tags=("t1",))
    recur = qc.queues["q"].recur("tests.Job", {}, 60, jid="rec1")
    return {"jid": jid, "failed": failed, "recur": recur}


def url_for(name: str, world: dict[str, str]) -> str:
    pattern = next(p for p in urlpatterns if p.name == name)
    jid = world["recur"] if name.startswith(("recurring_", "api_recurring_")) else world["jid"]
    return reverse(f"django_qless:{name}", args=_args(pattern, jid))


ALL_NAMES = sorted(p.name for p in urlpatterns if p.name)


def test_every_route_is_named_and_covered() -> None:
    """Every pattern has a name, so the parametrised tests below reach all of them."""
    assert all(p.name for p in urlpatterns)
    assert len(ALL_NAMES) == len(set(ALL_NAMES)) >= 40


@pytest.mark.django_db
@pytest.mark.parametrize("name", ALL_NAMES)
def test_anonymous_is_sent_to_login_or_refused(name: str, world: dict[str, str]) -> None:
    url = url_for(name, world)
    for method in ("get", "post"):
        response = getattr(Client(), method)(url)
        if name in API_NAMES:
            assert response.status_code in (401, 405), (name, method)
        else:
            assert response.status_code == 302, (name, method)
            assert response["Location"].startswith(reverse("admin:login"))
        assert response["Content-Security-Policy"] == CSP


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("who", ["plain", "staff_noperm"])
def test_users_without_permission_get_403(name: str, who: str, world: dict[str, str],
                                          request: pytest.FixtureRequest, as_user: Any,
                                          qc: Any) -> None:
    client = as_user(request.getfixturevalue(who))
    url = url_for(name, world)
    before = qc.redis.dbsize()
    get = client.get(url)
    post = client.post(url, {"priority": 5, "queue": "other", "tag": "x", "key": "heartbeat",
                             "value": "7", "id": "th1", "maximum": 3})
    assert get.status_code == 403, name
    assert post.status_code in (403, 405), name
    assert get["Content-Security-Policy"] == CSP
    assert qc.redis.dbsize() == before


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_viewer_cannot_post(name: str, viewer: Any, as_user: Any, world: dict[str, str],
                            qc: Any) -> None:
    client = as_user(viewer)
    job = qc.jobs[world["jid"]]
    response = client.post(url_for(name, world), {"priority": 99, "queue": "other",
                                                  "tag": "new", "key": "heartbeat",
                                                  "value": "7", "id": "th1", "maximum": 3})
    assert response.status_code == 403, name
    after = qc.jobs[world["jid"]]
    assert (after.priority, after.queue_name, after.tags) == (job.priority, job.queue_name,
                                                             job.tags)
    assert qc.config["heartbeat"] == 60
    assert not qc.queues["q"].paused
    assert qc.jobs.failed() == {"boom.Error": 1}


@pytest.mark.parametrize("name", ALL_NAMES)
def test_viewer_gets_every_page(name: str, viewer: Any, as_user: Any,
                                world: dict[str, str]) -> None:
    """GET works for a viewer, except confirmation pages of actions (manage only)."""
    response = as_user(viewer).get(url_for(name, world))
    manage_only = {"job_cancel", "failed_retry", "failed_cancel", "recurring_cancel",
                   "failed_retry_all"}
    manage_only |= {"worker_forget", "queue_forget"}  # the console's confirmation pages
    manage_only |= {"worker_quiet", "worker_stop"}
    manage_only |= {"flow_retry", "flow_cancel"}  # POST-only actions that need manage
    manage_only |= {"queue_empty", "jobs_all"}  # the operator tools' confirmation pages
    post_only = {"queue_pause", "queue_unpause", "queue_settings", "queue_rate_limit",
                 "job_retry", "job_move",
                 "job_priority", "job_track", "job_untrack", "job_tag", "job_untag",
                 "job_timeout", "job_undepend", "config_unset", "throttle_delete", "jobs_bulk",
                 "schedule_run", "recurring_run"}
    if name in manage_only:
        assert response.status_code == 403
    elif name in post_only:
        assert response.status_code in (403, 405)
    else:
        assert response.status_code == 200, (name, response.content[:500])
    assert response["Content-Security-Policy"] == CSP
    assert response["X-Frame-Options"] == "DENY"
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


def test_viewer_sees_no_action_buttons(viewer: Any, manager: Any, as_user: Any,
                                       world: dict[str, str]) -> None:
    pages = [reverse("django_qless:job", args=[world["failed"]]),
             reverse("django_qless:failed"),
             reverse("django_qless:failed_group", args=["boom.Error"]),
             reverse("django_qless:queue", args=["q"]),
             reverse("django_qless:recurring_detail", args=[world["recur"]]),
             reverse("django_qless:config"),
             reverse("django_qless:throttles")]
    for url in pages:
        # Only the dashboard's own content: the admin header has a logout form.
        seen = as_user(viewer).get(url).content.decode().split('id="qless"', 1)[1]
        full = as_user(manager).get(url).content.decode().split('id="qless"', 1)[1]
        assert 'method="post"' not in seen, url
        assert "csrfmiddlewaretoken" not in seen, url
        assert 'method="post"' in full or "Retry all" in full, url
    job_page = as_user(viewer).get(reverse("django_qless:job", args=[world["failed"]]))
    assert b">Retry<" not in job_page.content and b"Cancel&hellip;" not in job_page.content
    manager_page = as_user(manager).get(reverse("django_qless:job", args=[world["failed"]]))
    assert b">Retry<" in manager_page.content and b"Cancel&hellip;" in manager_page.content


def test_csrf_is_enforced_on_actions(manager: Any, as_user: Any, world: dict[str, str],
                                     qc: Any) -> None:
    client = as_user(manager, csrf=True)
    url = reverse("django_qless:job_priority", args=[world["jid"]])
    refused = client.post(url, {"priority": 42})
    assert refused.status_code == 403
    assert qc.jobs[world["jid"]].priority == 0
    page = client.get(reverse("django_qless:job", args=[world["jid"]]))
    token = page.context["csrf_token"]
    accepted = client.post(url, {"priority": 42, "csrfmiddlewaretoken": str(token)})
    assert accepted.status_code == 302
    assert qc.jobs[world["jid"]].priority == 42
    pause = client.post(reverse("django_qless:queue_pause", args=["q"]))
    assert pause.status_code == 403 and not qc.queues["q"].paused


def test_no_csrf_exempt_anywhere() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "django_qless"
    for path in [*root.glob("views/*.py"), root / "urls.py", root / "admin.py"]:
        assert "csrf_exempt" not in path.read_text(), path


def test_api_accepts_bearer_token_only_when_right(world: dict[str, str], db: None) -> None:
    url = reverse("django_qless:api_overview")
    assert Client().get(url).status_code == 401
    assert Client().get(url, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert Client().get(url, HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 401
    ok = Client().get(url, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert ok.status_code == 200 and ok["Content-Type"] == "application/json"
    metrics = Client().get(reverse("django_qless:metrics"), HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert metrics.status_code == 200
    assert metrics["Content-Type"].startswith("text/plain")


def test_api_without_configured_token_refuses_any_bearer(world: dict[str, str], db: None,
                                                        settings: Any) -> None:
    settings.QLESS_UI = {}
    response = Client().get(reverse("django_qless:api_overview"), HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


def test_api_is_get_only(mc: Client, world: dict[str, str]) -> None:
    assert mc.post(reverse("django_qless:api_overview")).status_code == 405


def test_admin_index_lists_the_dashboard_for_viewers_only(viewer: Any, staff_noperm: Any,
                                                          as_user: Any) -> None:
    link = reverse("admin:django_qless_dashboard_changelist")
    assert link.encode() in as_user(viewer).get(reverse("admin:index")).content
    assert link.encode() not in as_user(staff_noperm).get(reverse("admin:index")).content


def test_pages_under_the_admin_link_within_the_admin(viewer: Any, as_user: Any,
                                                     world: dict[str, str]) -> None:
    client = as_user(viewer)
    home = client.get(reverse("admin:django_qless_dashboard_changelist"))
    assert home.status_code == 200
    queue_url = reverse("admin:django_qless:queue", args=["q"])
    assert queue_url.encode() in home.content
    page = client.get(queue_url)
    assert page.status_code == 200
    assert reverse("admin:django_qless:queue_tab", args=["q", "waiting"]).encode() in page.content
    assert page["Content-Security-Policy"] == CSP
    assert Client().get(queue_url).status_code == 302
