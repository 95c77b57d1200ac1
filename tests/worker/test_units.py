"""Worker building blocks without subprocesses: config, reservers, failures, hooks, titles."""

from __future__ import annotations

import random
import threading

import pytest

from django_qless.core.worker_options import WorkerConfig, sanitize_name
from django_qless.core.workers.proctitle import child_title, supervisor_title
from django_qless.core.workers.runner import (
    MAX_MESSAGE,
    CompositeHooks,
    Sandbox,
    WorkerHooks,
    compose,
    error_group,
    format_failure,
)
from django_qless.core.workers.shards import QueueSelection, Reserver


def test_config_splits_queues_and_validates():
    config = WorkerConfig(queues=("a,b", "c a"))
    assert config.queues == ("a", "b", "c")
    assert WorkerConfig(processes=0).serial and WorkerConfig(processes=3).process_count == 3
    assert WorkerConfig(fork_per_job=True).jobs_per_child == 1
    for bad in ({"interval": 0}, {"processes": -1}, {"reserver": "lifo"}, {"timeout": -1},
                {"name": "has space"}, {"name": "has:colon"}, {"max_jobs": -2}):
        with pytest.raises(ValueError):
            WorkerConfig(**bad)
    assert sanitize_name("host name:1\x00") == "host_name_1_"
    assert WorkerConfig(queues=("q",)).as_dict()["queues"] == ("q",)


def test_reservers_order_queues():
    known = ["img.big", "img.small", "mail", "video"]
    sel = QueueSelection(["mail", "img.*"], lambda: list(known))
    assert sel.names() == ["mail", "img.big", "img.small"]
    assert Reserver("ordered", sel).order() == ["mail", "img.big", "img.small"]
    rr = Reserver("round-robin", sel)
    firsts = [rr.order()[0] for _ in range(4)]
    assert firsts == ["mail", "img.big", "img.small", "mail"]
    random.seed(3)
    shuffled = {tuple(Reserver("shuffled", sel).order()) for _ in range(30)}
    assert len(shuffled) > 1 and all(sorted(s) == sorted(sel.names()) for s in shuffled)
    with pytest.raises(ValueError):
        Reserver("lifo", sel)


def test_patterns_refresh_when_a_new_matching_queue_wakes_us():
    known = ["img.a"]
    clock = [0.0]
    sel = QueueSelection(["img.*"], lambda: list(known), refresh=60, clock=lambda: clock[0])
    assert sel.names() == ["img.a"]
    known.append("img.b")
    assert sel.names() == ["img.a"]  # cached until the refresh period...
    sel.note_wake("img.b")  # ...unless a wake-up names a matching queue we have not seen
    assert sel.names() == ["img.a", "img.b"]
    sel.note_wake("video")
    known.append("img.c")
    assert sel.names() == ["img.a", "img.b"]
    clock[0] = 61
    assert sel.names() == ["img.a", "img.b", "img.c"]


def test_failure_group_and_truncated_traceback():
    class Custom(Exception):
        pass

    try:
        raise Custom("x" * 200_000)
    except Custom as exc:
        text = format_failure(exc)
        assert error_group(exc).endswith("truncated_traceback.<locals>.Custom")
    assert len(text.encode()) <= MAX_MESSAGE
    assert text.startswith("Traceback") and "[truncated]" in text
    assert error_group(ValueError()) == "builtins.ValueError"


def test_middleware_and_hooks_nest_in_order():
    calls: list[str] = []

    def mw(tag):
        def inner(job, call_next):
            calls.append(f"{tag}>")
            result = call_next()
            calls.append(f"<{tag}")
            return result
        return inner

    assert compose([mw("a"), mw("b")], None, lambda: calls.append("job") or 5)() == 5
    assert calls == ["a>", "b>", "job", "<b", "<a"]

    class Rec(WorkerHooks):
        def __init__(self, tag):
            self.tag = tag

        def around_job(self, job, call_next):
            calls.append(f"{self.tag}[")
            try:
                return call_next()
            finally:
                calls.append(f"]{self.tag}")

    calls.clear()
    assert CompositeHooks(Rec("x"), Rec("y")).around_job(None, lambda: 7) == 7
    assert calls == ["x[", "y[", "]y", "]x"]


def test_titles():
    assert supervisor_title(["a", "b"], 4, 4, False, 1234, 2) == (
        "qless_worker: supervisor queues=a,b children=4/4 paused=no done=1234 failed=2")
    assert child_title("host-123", ["a", "b"], jid="9f3c0000", klass="app.jobs.resize",
                       queue="images", elapsed=3.21) == (
        "qless_worker[host-123]: running 9f3c.. app.jobs.resize q=images 3.2s")
    assert child_title("host-123", ["a", "b"]) == "qless_worker[host-123]: idle waiting on a,b"


def test_sandbox_is_empty_per_job_and_removed(tmp_path):
    box = Sandbox(str(tmp_path), "w-1")
    path = box.get()
    (tmp_path / "w-1" / "f").write_text("x")
    box.cleanup()
    assert not (tmp_path / "w-1").exists()
    assert box.get() == path and not list((tmp_path / "w-1").iterdir())
    box.cleanup()
    # A leftover from a crashed predecessor is removed up front.
    (tmp_path / "w-2").mkdir()
    (tmp_path / "w-2" / "old").write_text("x")
    Sandbox(str(tmp_path), "w-2")
    assert not (tmp_path / "w-2").exists()
    assert threading.current_thread() is threading.main_thread()


def test_worker_never_imports_django():
    import subprocess
    import sys

    code = (
        "import sys, django_qless.core.workers, django_qless.core.worker_cli, "
        "django_qless.core.registry; "
        "bad = [m for m in sys.modules if m == 'django' or m.startswith('django.')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)



def test_abort_events_for_jobs_not_running_yet_are_kept_bounded_and_once(monkeypatch):
    from django_qless.core.workers import channels as listener

    heard = listener.HeardAborts()
    heard.note("a")
    assert heard.heard("a") and not heard.heard("a")  # (once)
    assert not heard.heard("never")
    for i in range(listener._ABORTS_KEPT + 10):  # bounded: the oldest go first
        heard.note(f"j{i}")
    assert len(heard) == listener._ABORTS_KEPT
    assert not heard.heard("j0") and heard.heard(f"j{listener._ABORTS_KEPT + 9}")
    heard.note("old")
    later = listener.time.monotonic() + listener._ABORT_MEMORY + 1
    monkeypatch.setattr(listener.time, "monotonic", lambda: later)
    assert not heard.heard("old")  # (heard too long ago to be about this attempt)
