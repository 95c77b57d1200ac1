"""What the worker says on stderr (real subprocesses) and stores as a failure message."""

from __future__ import annotations

import argparse

import pytest

from django_qless import __version__
from django_qless.core.worker_options import integer
from django_qless.core.workers.runner import format_failure

pytestmark = pytest.mark.timeout(60)

NOOP = "tests.worker.jobs.noop"


def start_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if " starting: " in line]


def test_serial_worker_logs_one_start_line(start_worker, redis_url):
    worker = start_worker("-n", "0", "--max-duration", "0.3", "--reap-interval", "0", "q")
    assert worker.wait() == 0
    [line] = start_lines(worker.stderr())
    assert f" INFO django_qless.worker: django-qless {__version__} worker " in line
    assert line.endswith(f"starting: serial, queues q, Redis {redis_url}"), line


def test_the_start_line_names_the_mode_what_patterns_match_and_no_password(
    start_worker, qless_client, redis_url, r
):
    for queue in ("img.a", "img.b", "other"):
        qless_client.queues[queue].put(NOOP, {}, delay=3600)  # known queues, nothing to run
    r.acl_setuser("starter", enabled=True, passwords=["+pw-s3cret"], keys=["*"],
                  channels=["*"], commands=["+@all"])
    try:
        url = redis_url.replace("://", "://starter:pw-s3cret@", 1)
        worker = start_worker("--url", url, "-n", "2", "--max-duration", "0.5", "q,img.*")
        assert worker.wait() == 0
    finally:
        r.acl_deluser("starter")
    log = worker.stderr()
    [line] = start_lines(log)
    assert " supervisor " in line and "starting: forking, 2 children, " in line, line
    assert "queues q,img.* (now q,img.a,img.b), Redis " in line, line
    assert "pw-s3cret" not in log and "starter:***@" in line, line


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_each_completion_is_logged_at_verbose(qless_client, start_worker, processes):
    jids = qless_client.queues["q"].put_many([{"klass": NOOP, "data": {}} for _ in range(3)])
    worker = start_worker("-n", processes, "--max-jobs", "3", "q")  # -v is always passed
    assert worker.wait() == 0
    lines = worker.stderr().splitlines()
    for jid in jids:
        done = [line for line in lines if f"job {jid} {NOOP} done in " in line]
        assert len(done) == 1 and " INFO " in done[0] and done[0].endswith(" ms"), lines


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-n", "2", "--max-jobs", "3"], "finished: --max-jobs reached"),
        (["-n", "1", "--child-max-jobs", "2", "--max-jobs", "4"],
         "finished: recycled after 2 jobs (--child-max-jobs)"),
    ],
    ids=["max-jobs", "child-max-jobs"],
)
def test_a_child_leaving_at_its_bound_is_not_reported_as_unexpected(
    qless_client, start_worker, args, expected
):
    qless_client.queues["q"].put_many([{"klass": NOOP, "data": {}} for _ in range(10)])
    worker = start_worker(*args, "q")
    assert worker.wait() == 0
    log = worker.stderr()
    assert expected in log
    assert "unexpected" not in log and "dies quickly" not in log


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_job_over_its_time_limit_is_logged_as_timed_out(qless_client, start_worker, processes):
    jid = qless_client.queues["q"].put("tests.worker.jobs.sleep_long", {"seconds": 30})
    worker = start_worker("-n", processes, "--timeout", "1", "--kill-grace", "1",
                          "--max-jobs", "1", "q")
    assert worker.wait(timeout=20) == 0
    log = worker.stderr()
    assert f"job {jid} timed out: still running after its limit of 1s" in log
    assert "aborted: shutdown" not in log
    assert qless_client.jobs[jid].failure["group"] == "django_qless.JobTimeout"


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_stored_failure_traceback_starts_at_the_job(qless_client, start_worker, processes):
    jid = qless_client.queues["q"].put("tests.worker.jobs.boom", {"n": 7})
    worker = start_worker("-n", processes, "--max-jobs", "1", "q")
    assert worker.wait() == 0
    message = qless_client.jobs[jid].failure["message"]
    lines = message.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith('  File "') and "tests/worker/jobs.py" in lines[1], message
    assert "django_qless" not in message and lines[-1] == "ValueError: boom 7"


def test_a_failure_inside_the_worker_code_keeps_its_whole_traceback():
    try:
        integer("not a number")  # raises inside django_qless itself
    except argparse.ArgumentTypeError as exc:
        message = format_failure(exc)
    assert "django_qless/core/worker_options.py" in message
    assert message.splitlines()[-1].startswith("argparse.ArgumentTypeError: must be an integer")
