"""Running a recurring job's template once now."""

from __future__ import annotations

from django_qless.core import Client, Queue
from django_qless.core.console.recurring_run import run_recurring_now


def test_run_now_puts_a_child_like_job_and_keeps_the_schedule(client: Client, q: Queue
                                                              ) -> None:
    q.recur("K", {"a": [1, 2]}, 3600, jid="hourly", offset=3600, priority=4, tags=["t"],
            retries=2)
    template = client.jobs.recurring("hourly")
    assert template is not None
    before = (template.next_run, template.count)
    jid = run_recurring_now(template)
    job = client.jobs[jid]
    assert (job.state, job.queue_name, job.klass_name, job.data) == ("waiting", "q", "K",
                                                                     {"a": [1, 2]})
    assert (job.priority, job.tags, job.retries) == (4, ("t",), 2)
    after = client.jobs.recurring("hourly")
    assert after is not None and (after.next_run, after.count) == before
