"""The signal bridge end to end: a real worker, a real listener, robust receivers."""

from __future__ import annotations

import threading
import time

import pytest

from django_qless import signals
from django_qless.bridge import Bridge
from django_qless.clients import get_client
from tests.app import jobs
from tests.app.helpers import manage, spawn

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    """Collect (signal name, jid, payload event) from every bridged signal."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.cond = threading.Condition()
        self.receivers = []
        for name, sig in signals.BRIDGED_SIGNALS.items():
            def receive(sender, event, _name=name, **kwargs):
                assert sender == "default" == event.alias and event.client is not None
                assert kwargs.keys() <= {"signal"}  # one payload: the JobEvent
                with self.cond:
                    self.seen.append((_name, event.jid, event.event))
                    self.cond.notify_all()
            sig.connect(receive, weak=False)
            self.receivers.append((sig, receive))

    def wait_for(self, predicate, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.seen):
                left = deadline - time.monotonic()
                assert left > 0, f"timed out; seen {self.seen}"
                self.cond.wait(left)

    def close(self) -> None:
        for sig, fn in self.receivers:
            sig.disconnect(fn)


@pytest.fixture
def recorder():
    rec = Recorder()
    yield rec
    rec.close()


def test_events_from_a_real_worker_become_signals(redis_url, tmp_path, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.job_completed.connect(broken, weak=False)  # connected first: runs first
    recorder = Recorder()
    try:
        with Bridge("default", health_check_interval=1.0) as bridge:
            ok = jobs.add.using(track=True).enqueue(1, b=1)
            bad = jobs.boom.enqueue()
            result = manage(redis_url, "qless_worker", "default", "--processes", "0",
                            "--max-jobs", "2", QLESS_TEST_DB=str(tmp_path / "db"))
            assert result.returncode == 0, result.stderr
            recorder.wait_for(lambda s: ("completed", ok.jid, "completed") in s
                              and ("failed", bad.jid, "failed") in s)
            get_client().jobs[ok.jid].untrack()
            canceled = jobs.add.enqueue(5)
            canceled.get().cancel()
            recorder.wait_for(lambda s: ("canceled", canceled.jid, "canceled") in s
                              and ("untrack", ok.jid, "untrack") in s)
        seen = recorder.seen
        # Every bridged event arrives once, even for a tracked job (two channels).
        assert seen.count(("completed", ok.jid, "completed")) == 1
        assert seen.count(("put", ok.jid, "put")) == 1
        assert ("track", ok.jid, "track") in seen and ("popped", ok.jid, "popped") in seen
        assert ("popped", bad.jid, "popped") not in seen  # untracked: no popped channel
        assert bridge.sent == len(seen)
        assert any("receiver bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    finally:
        signals.job_completed.disconnect(broken)
        recorder.close()


def test_bridge_reconnects_after_the_connection_is_killed(redis_url, recorder, r):
    with Bridge("default", health_check_interval=0.5) as bridge:
        killed = r.client_kill_filter(_type="pubsub")
        assert killed >= 1
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            handle = jobs.add.enqueue(1)
            time.sleep(0.2)
            if ("put", handle.jid, "put") in recorder.seen:
                break
        else:
            pytest.fail("no event after reconnect")
        assert bridge.listener.connects >= 2


def test_qless_events_command_runs_receivers_until_sigterm(redis_url, tmp_path):
    import signal as os_signal

    proc = spawn(redis_url, "qless_events", "--health-check-interval", "1", "-v", "1")
    try:
        line = proc.stdout.readline()
        assert "listening" in line, proc.stderr.read() if proc.poll() is not None else line
        jobs.add.enqueue(1)
        time.sleep(0.3)
        proc.send_signal(os_signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert "stopped after 1 signal\n" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_lock_lost_and_stalled_become_signals(redis_url, recorder):
    from django_qless.core.client import Client

    client = get_client()
    client.config["heartbeat"] = 1
    client.config["grace-period"] = 0
    with Bridge("default", health_check_interval=1.0):
        handle = jobs.add.using(track=True).enqueue(1)
        first = Client(redis_url, worker_name="first-worker")
        second = Client(redis_url, worker_name="second-worker")
        try:
            assert first.queues["default"].pop().jid == handle.jid
            time.sleep(1.3)
            assert second.queues["default"].pop().jid == handle.jid
        finally:
            first.close()
            second.close()
        recorder.wait_for(lambda s: ("lock_lost", handle.jid, "lock_lost") in s
                          and ("stalled", handle.jid, "stalled") in s)
        timed = jobs.add.enqueue(2)
        popped = client.queues["default"].pop()
        assert popped.jid == timed.jid
        popped.timeout()
        recorder.wait_for(lambda s: ("lock_lost", timed.jid, "lock_lost") in s)
    assert recorder.seen.count(("lock_lost", handle.jid, "lock_lost")) == 1
