"""Wake-up latency, glob queues, resume, exec mode, dry run and option printing."""

from __future__ import annotations

import json
import signal
import statistics
import sys
import time

import pytest

from tests.worker.conftest import wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("processes", ["0", "1"])
def test_idle_worker_starts_a_put_job_well_under_the_interval(qless_client, start_worker,
                                                              processes):
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", processes, "--interval", "30")
    warm = q.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[warm].state == "complete")
    latencies = []
    for _ in range(40):
        time.sleep(0.01)  # let the worker go idle on its wake-up subscription
        before = time.time()
        jid = q.put("tests.worker.jobs.ping", {})
        got = qless_client.redis.blpop(["test:pings"], timeout=5)
        assert got is not None
        ping_jid, started = json.loads(got[1])
        assert ping_jid == jid
        latencies.append(started - before)
    latencies.sort()
    p50, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]
    sys.stderr.write(f"\nput->start latency (-n {processes}): p50={p50 * 1000:.2f}ms "
                     f"p99={p99 * 1000:.2f}ms max={latencies[-1] * 1000:.2f}ms\n")
    # Sanity bound (shared CI machine): far below the 30 s interval, no poll-sized gaps.
    assert p50 < 0.05 and latencies[-1] < 1.0
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_glob_queue_pattern_picks_up_a_brand_new_queue(qless_client, start_worker):
    worker = start_worker("img.*", "-n", "0", "--interval", "30")
    # No queue matches yet, so the worker has nothing to reserve from: give it time to start.
    time.sleep(1.0)
    t0 = time.monotonic()
    jid = qless_client.queues["img.big"].put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=5)
    assert time.monotonic() - t0 < 3
    other = qless_client.queues["video"].put("tests.worker.jobs.ok", {})
    time.sleep(0.3)
    assert qless_client.jobs[other].state == "waiting"
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


@pytest.mark.parametrize("processes", ["0", "1"])
def test_resume_runs_jobs_the_worker_name_still_holds(qless_client, start_worker, processes):
    q = qless_client.queues["q"]
    name = "resumer" if processes == "0" else "resumer-0"
    jid = q.put("tests.worker.jobs.ok", {})
    jobs, _ = qless_client.reserve(["q"], 1, worker=name)
    assert [j.jid for j in jobs] == [jid]
    worker = start_worker("q", "-n", processes, "--name", "resumer", "--resume")
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=5)
    assert ledger(qless_client.redis, "done", jid)[0]["worker"] == name
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


@pytest.mark.parametrize("processes", ["0", "1"])
def test_exec_mode_runs_a_command_per_job(qless_client, start_worker, processes, work_dir):
    tmp_path = work_dir
    script = tmp_path / "job.py"
    script.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "jid = sys.argv[-1]\n"
        f"open({str(tmp_path)!r} + '/' + jid, 'w').write(json.dumps(data))\n"
        "sys.stderr.write('x' * 10000 + 'the end of stderr')\n"
        "sys.exit(data['code'])\n"
    )
    q = qless_client.queues["q"]
    good = q.put("anything.at.all", {"code": 0, "big": 12345678901234567890})
    bad = q.put("anything.else", {"code": 3})
    worker = start_worker("q", "-n", processes, "--exec", f"{sys.executable} {script}")
    wait_until(lambda: qless_client.jobs[good].state == "complete"
               and qless_client.jobs[bad].state == "failed")
    assert (tmp_path / good).read_text() == json.dumps({"code": 0, "big": 12345678901234567890})
    failure = qless_client.jobs[bad].failure
    assert failure["group"] == "django_qless.core.workers.execmode.ExecFailed"
    assert "exited with status 3" in failure["message"]
    assert failure["message"].endswith("the end of stderr")
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_dry_run_and_print_options(qless_client, start_worker):
    qless_client.queues["q"].put("tests.worker.jobs.ok", {})
    dry = start_worker("q", "--dry-run")
    assert dry.wait() == 0
    out = dry.stdout()
    assert "would serve q" in out and "1 waiting" in out
    assert "tests.worker.jobs.ok" in out
    assert qless_client.queues["q"].counts["waiting"] == 1
    printed = start_worker("q", "-n", "3", "--print-options", "--timeout", "7")
    assert printed.wait() == 0
    options = json.loads(printed.stdout())
    assert options["processes"] == 3 and options["timeout"] == 7.0
    assert options["queues"] == ["q"]


def test_bad_options_exit_with_usage_code(start_worker):
    worker = start_worker("q", "--interval", "0")
    assert worker.wait() == 2
    assert "argument --interval: must be > 0" in worker.stderr()
    worker = start_worker("--name", "bad name")
    assert worker.wait() == 2


@pytest.mark.parametrize("processes", ["0", "1"])
def test_exec_mode_kills_a_command_over_the_time_limit(qless_client, start_worker, processes):
    q = qless_client.queues["q"]
    jid = q.put("anything", {})
    command = f"{sys.executable} -c 'import time; time.sleep(30)'"
    worker = start_worker("q", "-n", processes, "--exec", command, "--timeout", "1",
                          "--kill-grace", "1")
    wait_until(lambda: qless_client.jobs[jid].state == "failed", timeout=10)
    failure = qless_client.jobs[jid].failure
    assert failure["group"] == "django_qless.JobTimeout"
    assert "time limit of 1s" in failure["message"]
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_worker_warns_when_redis_may_evict_keys(r, start_worker):
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        worker = start_worker("q", "-n", "0")
        wait_until(lambda: "maxmemory-policy is 'allkeys-lru'" in worker.stderr(), timeout=10)
        wait_until(lambda: r.zcard("ql:workers"))  # started (signal handlers in place)
        worker.signal(signal.SIGQUIT)
        assert worker.wait() == 0
    finally:
        r.config_set("maxmemory-policy", "noeviction")
