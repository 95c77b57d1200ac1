"""Wait for a job to finish, woken by the engine's log events instead of polling."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .exceptions import JobNotFound, QlessError
from .serialization import check_jid, check_number

if TYPE_CHECKING:
    from .client import Client
    from .feed import LogFeed
    from .job import Job

__all__ = ["FINISHED", "WaitTimeout", "wait_for"]

FINISHED = frozenset({"complete", "failed"})
# A long wait reads the job again this often, in case an event was lost (pub/sub delivers
# at most once, and a reconnect loses what was published meanwhile).
_CHECK_EVERY = 30.0


class WaitTimeout(QlessError, TimeoutError):
    """The job did not finish within the time given."""


def wait_for(client: Client, jid: str, timeout: float | None = None) -> Job:
    """Return job `jid` once it is complete or failed; WaitTimeout after `timeout` s.

    Subscribes to the job's keyspace log channel first, then reads the job, so a finish
    between the two is not missed; each event naming the jid wakes it to read the job again.
    JobNotFound if the job does not exist or disappears (canceled, or expired).
    """
    from .feed import LogFeed  # pub/sub machinery only for callers that wait

    jid = check_jid(jid)
    limit = None if timeout is None else check_number("timeout", timeout, 0, 86_400 * 365)
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        with LogFeed(client) as feed:
            feed.open()
            try:
                return _wait_on(feed, client, jid, deadline)
            except ConnectionError:
                continue  # a new feed; the job is read again first


def _wait_on(feed: LogFeed, client: Client, jid: str, deadline: float | None) -> Job:
    """Read the job, then sleep on the feed until an event names it; repeat."""
    while True:
        job = client.jobs.get(jid)
        if job is None:
            raise JobNotFound(f"Job {jid} does not exist (canceled, expired or never put)")
        if job.state in FINISHED:
            return job
        checked = time.monotonic()
        while time.monotonic() - checked < _CHECK_EVERY:
            left = _CHECK_EVERY if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"job {jid} did not finish in time (it is {job.state})")
            event = feed.next(timeout=min(left, _CHECK_EVERY))
            if event is not None and event.get("jid") == jid:
                break
