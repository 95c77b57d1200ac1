"""Exact pub/sub payloads and publish order.

The wake-up channel `ql:wake:<queue>` (docs/engine.md) is an additive extension whose position
relative to the qless events is unspecified, so these tests drop it; test_extensions.py covers it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

__all__: list[str] = []

Events = Callable[[], list[tuple[str, str]]]


def qless_events(events: Events) -> list[tuple[str, str]]:
    """Return the events so far, without the wake-up extension channel."""
    return [e for e in events() if not e[0].startswith("ql:wake:")]


def put(lua: Any, jid: str = "jid", *, now: float = 0, worker: str = "worker",
        queue: str = "queue", **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, worker, queue, jid, "klass", {}, 0, *pairs)


def running(lua: Any, jid: str = "jid", *, track: bool = False, retries: int = 5) -> None:
    """Put and pop one job as `worker`, optionally tracked."""
    put(lua, jid, retries=retries)
    if track:
        lua("track", 0, "track", jid)
    assert lua.json("pop", 0, "queue", "worker", 1)[0]["jid"] == jid


PUT = '{"jid":"jid","event":"put","queue":"queue"}'
LOCK_LOST = '{"jid":"jid","event":"lock_lost","worker":"worker"}'


def test_put_event(lua: Any, events: Events) -> None:
    """A put publishes one `put` object on ql:log."""
    put(lua)
    assert qless_events(events) == [("ql:log", PUT)]


def test_reput_tracked(lua: Any, events: Events) -> None:
    """Re-put of a tracked job: ql:log put, then ql:put."""
    put(lua)
    lua("track", 0, "track", "jid")
    events()
    put(lua, now=1)
    assert qless_events(events) == [("ql:log", PUT), ("ql:put", "jid")]


def test_track_and_untrack_events(lua: Any, events: Events) -> None:
    """Publish the jid on ql:track and ql:untrack."""
    put(lua)
    events()
    lua("track", 0, "track", "jid")
    lua("track", 0, "untrack", "jid")
    assert qless_events(events) == [("ql:track", "jid"), ("ql:untrack", "jid")]


def test_pop_tracked(lua: Any, events: Events) -> None:
    """Popping a tracked job publishes ql:popped only."""
    put(lua)
    lua("track", 0, "track", "jid")
    events()
    lua("pop", 0, "queue", "worker", 1)
    assert qless_events(events) == [("ql:popped", "jid")]


def test_pop_untracked_is_silent(lua: Any, events: Events) -> None:
    """Popping an untracked job publishes nothing."""
    put(lua)
    events()
    lua("pop", 0, "queue", "worker", 1)
    assert qless_events(events) == []


def test_complete_tracked(lua: Any, events: Events) -> None:
    """Complete: ql:completed before the ql:log completed object."""
    running(lua, track=True)
    events()
    lua("complete", 1, "jid", "worker", "queue", {})
    assert qless_events(events) == [
        ("ql:completed", "jid"),
        ("ql:log", '{"jid":"jid","event":"completed","queue":"queue"}'),
    ]


def test_complete_untracked(lua: Any, events: Events) -> None:
    """Complete of an untracked job publishes only the log object."""
    running(lua)
    events()
    lua("complete", 1, "jid", "worker", "queue", {})
    assert qless_events(events) == [
        ("ql:log", '{"jid":"jid","event":"completed","queue":"queue"}')]


def test_advance(lua: Any, events: Events) -> None:
    """Advance publishes only the `advanced` object."""
    running(lua)
    events()
    lua("complete", 1, "jid", "worker", "queue", {}, "next", "later")
    assert qless_events(events) == [
        ("ql:log", '{"jid":"jid","to":"later","event":"advanced","queue":"queue"}')]


def test_advance_tracked(lua: Any, events: Events) -> None:
    """A tracked advance also publishes ql:completed first."""
    running(lua, track=True)
    events()
    lua("complete", 1, "jid", "worker", "queue", {}, "next", "later")
    assert qless_events(events) == [
        ("ql:completed", "jid"),
        ("ql:log", '{"jid":"jid","to":"later","event":"advanced","queue":"queue"}'),
    ]


def test_fail_tracked(lua: Any, events: Events) -> None:
    """Fail: ql:log failed object, then ql:failed."""
    running(lua, track=True)
    events()
    lua("fail", 1, "jid", "worker", "grp", "msg")
    assert qless_events(events) == [
        ("ql:log",
         '{"message":"msg","jid":"jid","group":"grp","event":"failed","worker":"worker"}'),
        ("ql:failed", "jid"),
    ]


def test_fail_payload_escaping(lua: Any, events: Events) -> None:
    """Escape `"` and `/` like cjson."""
    running(lua)
    events()
    lua("fail", 1, "jid", "worker", "g/1", 'say "hi" a/b')
    assert qless_events(events) == [
        ("ql:log", '{"message":"say \\"hi\\" a\\/b","jid":"jid","group":"g\\/1",'
                   '"event":"failed","worker":"worker"}'),
    ]


def test_retry_exhausted_tracked(lua: Any, events: Events) -> None:
    """A retry that exhausts a tracked job publishes only ql:failed."""
    running(lua, track=True, retries=0)
    events()
    lua("retry", 1, "jid", "queue", "worker")
    assert qless_events(events) == [("ql:failed", "jid")]


def test_retry_silent(lua: Any, events: Events) -> None:
    """A plain retry publishes no qless event."""
    running(lua, track=True)
    events()
    lua("retry", 1, "jid", "queue", "worker")
    assert qless_events(events) == []


def test_lock_expiry_tracked(lua: Any, events: Events) -> None:
    """Courtesy notice: ql:stalled, ql:w:<owner> lock_lost, ql:log lock_lost."""
    running(lua, track=True)
    events()
    lua("pop", 61, "queue", "w2", 1)
    assert qless_events(events) == [
        ("ql:stalled", "jid"), ("ql:w:worker", LOCK_LOST), ("ql:log", LOCK_LOST)]


def test_lock_expiry_exhausts_untracked(lua: Any, events: Events) -> None:
    """Grace 0, retries 0: lock_lost twice, then the failed object."""
    lua("config.set", 0, "grace-period", 0)
    running(lua, retries=0)
    events()
    lua("pop", 61, "queue", "w2", 1)
    failed = ('{"message":"Job exhausted retries in queue \\"queue\\"","jid":"jid",'
              '"group":"failed-retries-queue","event":"failed","worker":"worker"}')
    assert qless_events(events) == [
        ("ql:w:worker", LOCK_LOST), ("ql:log", LOCK_LOST), ("ql:log", failed)]


def test_lock_expiry_exhausts_tracked(lua: Any, events: Events) -> None:
    """Tracked: ql:stalled first, and ql:failed before the failed log object."""
    lua("config.set", 0, "grace-period", 0)
    running(lua, track=True, retries=0)
    events()
    lua("pop", 61, "queue", "w2", 1)
    got = qless_events(events)
    assert [c for c, _ in got] == [
        "ql:stalled", "ql:w:worker", "ql:log", "ql:failed", "ql:log"]
    assert got[3] == ("ql:failed", "jid")


def test_lock_expiry_redispatch_is_quiet_for_untracked(lua: Any, events: Events) -> None:
    """Re-dispatch after the grace period publishes nothing for an untracked job."""
    running(lua)
    lua("pop", 61, "queue", "w2", 1)
    events()
    lua("pop", 71, "queue", "w2", 1)
    assert qless_events(events) == []


def test_timeout(lua: Any, events: Events) -> None:
    """Timeout: ql:w:<owner> lock_lost, then ql:log lock_lost."""
    running(lua)
    events()
    lua("timeout", 1, "jid")
    assert qless_events(events) == [("ql:w:worker", LOCK_LOST), ("ql:log", LOCK_LOST)]


def test_put_steals_from_other_worker(lua: Any, events: Events) -> None:
    """Put by another worker: put, then lock_lost to the old owner and the log."""
    running(lua)
    events()
    put(lua, now=1, worker="other")
    assert qless_events(events) == [
        ("ql:log", PUT), ("ql:w:worker", LOCK_LOST), ("ql:log", LOCK_LOST)]


def test_put_by_owner(lua: Any, events: Events) -> None:
    """Re-put by the owning worker: only the put object."""
    running(lua)
    events()
    put(lua, now=1, worker="worker")
    assert qless_events(events) == [("ql:log", PUT)]


def test_cancel_tracked_waiting(lua: Any, events: Events) -> None:
    """Cancel of a tracked waiting job: ql:log canceled, then ql:canceled."""
    put(lua)
    lua("track", 0, "track", "jid")
    events()
    lua("cancel", 1, "jid")
    assert qless_events(events) == [
        ("ql:log", '{"jid":"jid","queue":"queue","event":"canceled","worker":""}'),
        ("ql:canceled", "jid"),
    ]


def test_cancel_running(lua: Any, events: Events) -> None:
    """Cancel of a running job: ql:log canceled, then the same on ql:w:<owner>."""
    running(lua)
    events()
    lua("cancel", 1, "jid")
    payload = '{"jid":"jid","queue":"queue","event":"canceled","worker":"worker"}'
    assert qless_events(events) == [("ql:log", payload), ("ql:w:worker", payload)]


def test_cancel_missing_job(lua: Any, events: Events) -> None:
    """A canceled unknown jid reports `false` queue and worker."""
    lua("cancel", 0, "nope")
    assert qless_events(events) == [
        ("ql:log", '{"jid":"nope","queue":false,"event":"canceled","worker":false}')]


def test_cancel_complete_is_silent(lua: Any, events: Events) -> None:
    """Skipped completed jobs publish nothing."""
    running(lua)
    lua("complete", 1, "jid", "worker", "queue", {})
    events()
    lua("cancel", 2, "jid")
    assert qless_events(events) == []


@pytest.mark.parametrize(
    "command,args",
    [
        ("heartbeat", ["jid", "worker"]),
        ("priority", ["jid", 5]),
        ("tag", ["add", "jid", "t"]),
        ("tag", ["remove", "jid", "t"]),
        ("log", ["jid", "note"]),
        ("recur", ["queue", "rec", "klass", "{}", "interval", 60, 100]),
        ("pause", ["queue"]),
        ("queues", []),
        ("workers", []),
        ("stats", ["queue", 0]),
        ("get", ["jid"]),
        ("jobs", ["running", "queue"]),
        ("length", ["queue"]),
        ("failed", []),
        ("config.get", []),
    ],
)
def test_silent_commands(lua: Any, events: Events, command: str, args: list[Any]) -> None:
    """These commands publish no qless event."""
    running(lua)
    events()
    lua(command, 1, *args)
    assert qless_events(events) == []


def test_depends_is_silent(lua: Any, events: Events) -> None:
    """depends on/off publishes no qless event."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    put(lua, "c")
    events()
    lua("depends", 1, "b", "on", "c")
    lua("depends", 1, "b", "off", "all")
    assert qless_events(events) == []


def test_fail_payload_controls_and_unicode(lua: Any, events: Events) -> None:
    """Escape control characters and backslashes like cjson; pass UTF-8 through raw."""
    running(lua)
    events()
    message = 'line1\nline2\ttab \u00e9 back\\slash \x01 "q" a/b'
    lua("fail", 1, "jid", "worker", "grp", message)
    encoded = json.dumps(message, ensure_ascii=False).replace("/", "\\/")
    assert qless_events(events) == [
        ("ql:log", '{"message":' + encoded + ',"jid":"jid","group":"grp",'
                   '"event":"failed","worker":"worker"}'),
    ]
