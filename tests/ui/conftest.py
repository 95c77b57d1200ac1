"""Fixtures for the dashboard tests: the test Redis as QLESS, users with each access level."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings

from django_qless.clients import clients, get_client
from tests.ui.browser import ARGS, CHROMIUM, shots_dir

XSS_PROBES = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "');alert(1);//",
)
TOKEN = "t0ken-for-tests"


@pytest.fixture(autouse=True)
def qless_settings(redis_url: str) -> Iterator[str]:
    """Point the default alias at the flushed test database; set an API token."""
    with override_settings(
        QLESS={"default": {"URL": redis_url}, "JOB_MODULES": ["tests.app.legacy_jobs"]},
        QLESS_UI={"API_TOKEN": TOKEN, "POLL_INTERVAL_MS": 500, "EVENTS_STREAM_SECONDS": 3},
    ):
        yield redis_url
    clients.close_all()


@pytest.fixture
def qc(qless_settings: str) -> Any:
    """The core client the dashboard uses."""
    return get_client("default")


def _user(name: str, *, staff: bool, perms: tuple[str, ...] = ()) -> User:
    user = User.objects.create_user(name, f"{name}@example.com", "pw-" + name)
    user.is_staff = staff
    user.save()
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_qless", codename=codename))
    return User.objects.get(pk=user.pk)  # fresh: no stale permission cache


@pytest.fixture
def manager(db: None) -> User:
    """Staff with view + manage permissions."""
    return _user("manager", staff=True, perms=("view_dashboard", "manage_jobs"))


@pytest.fixture
def viewer(db: None) -> User:
    """Staff with the view permission only."""
    return _user("viewer", staff=True, perms=("view_dashboard",))


@pytest.fixture
def plain(db: None) -> User:
    """A logged-in user who is not staff."""
    return _user("plain", staff=False)


@pytest.fixture
def staff_noperm(db: None) -> User:
    """Staff without any dashboard permission."""
    return _user("staffnoperm", staff=True)


@pytest.fixture
def as_user() -> Callable[..., Client]:
    """Return a test client logged in as the given user."""

    def make(user: User, *, csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user)
        return client

    return make


@pytest.fixture
def mc(manager: User, as_user: Callable[..., Client]) -> Client:
    """A test client logged in as the manager."""
    return as_user(manager)


def fail_job(qc: Any, queue: str = "q", *, group: str = "boom.Error",
             message: str = "Traceback...\nValueError: boom", worker: str = "w1",
             klass: str = "tests.Job", data: dict[str, Any] | None = None,
             tags: tuple[str, ...] = (), priority: int = 2147483647) -> str:
    """Put, pop and fail a job; return its jid."""
    from django_qless.core.client import Client as CoreClient

    # The highest priority pops first, so other waiting jobs of the queue stay untouched.
    jid = qc.queues[queue].put(klass, data or {"n": 1}, tags=tags, priority=priority)
    popper = CoreClient(qc.redis, worker_name=worker, _clock=qc.now)
    job = popper.queues[queue].pop()
    assert job is not None and job.jid == jid
    job.fail(group, message)
    return jid


def pop_job(qc: Any, queue: str = "q", worker: str = "w1") -> Any:
    """Pop one job as a named worker (so it is running), through the engine the dashboard
    calls (the shipped one, not the caller-clock variant: the statistics samples one engine
    library holds are another library's to read only once written out)."""
    from django_qless.core.client import Client as CoreClient

    return CoreClient(qc.redis, worker_name=worker).queues[queue].pop()


# -- headless Chromium (Debian's; never a downloaded browser) ---------------------------------

@pytest.fixture(scope="module")
def allow_sync_orm() -> Iterator[None]:
    """Let fixtures use the ORM while Playwright's sync API keeps an event loop running."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="module")
def browser(allow_sync_orm: None) -> Iterator[Any]:
    """One headless Chromium per module; skip when Chromium or Playwright is missing."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Return where screenshots go: docs/screenshots with QLESS_SAVE_SCREENSHOTS=1."""
    return shots_dir(tmp_path)


@pytest.fixture
def page(browser: Any, live_server: Any, transactional_db: None, manager: Any) -> Iterator[Any]:
    """A logged-in page; dialogs are recorded (so XSS cannot hide), dismissed unless the test
    sets ``page.accept = True`` (to confirm an action)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.dialogs, tab.accept = [], False

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append(dialog.message)
        dialog.accept() if tab.accept else dialog.dismiss()

    tab.on("dialog", on_dialog)
    tab.set_default_timeout(15000)
    tab.goto(f"{live_server.url}/admin/login/?next=/qless/")
    tab.fill("#id_username", "manager")
    tab.fill("#id_password", "pw-manager")
    tab.click("input[type=submit]")
    tab.wait_for_url(re.compile(r".*/qless/$"))
    tab.base = live_server.url
    yield tab
    context.close()
