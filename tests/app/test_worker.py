"""`manage.py qless_worker` as a real subprocess: registry, hooks, signals, retries."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_qless.clients import get_client
from django_qless.hooks import DjangoWorkerHooks
from tests.app import jobs
from tests.app.helpers import manage

pytestmark = pytest.mark.django_db(transaction=True)


def worker(redis_url: str, *args: str, **env: str):
    result = manage(redis_url, "qless_worker", *args, **env)
    assert result.returncode == 0, result.stderr
    return result


def test_worker_runs_registered_jobs_and_refuses_the_rest(redis_url, tmp_path):
    client = get_client()
    ok = jobs.add.enqueue(40, b=2)
    legacy = client.queues["default"].put("tests.app.legacy_jobs.Legacy", {})
    sneaky = client.queues["default"].put("tests.app.not_allowed.Sneaky", {})
    evil = client.queues["default"].put("os.system", {"args": ["touch /tmp/pwned"]})
    boom = jobs.boom.enqueue("bad")
    worker(redis_url, "default", "--processes", "0", "--max-jobs", "5",
           QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
    assert ok.result() == 42
    assert client.jobs[legacy].state == "complete"
    assert client.jobs[legacy].data == {"legacy": True}
    for jid in (sneaky, evil):
        found = client.jobs[jid]
        assert found.state == "failed"
        assert found.failure["group"] == "django_qless.UnknownJob"
        assert "not a registered job" in found.failure["message"]
    assert client.jobs[boom.jid].failure["group"] == "builtins.ValueError"


def test_forking_worker_runs_retries_and_sends_in_process_signals(redis_url, tmp_path):
    log = tmp_path / "signals.jsonl"
    flaky = jobs.flaky.enqueue(1, "fork")
    queries = [jobs.db_query.enqueue() for _ in range(3)]
    worker(redis_url, "default", "--processes", "1", "--fork-per-job", "--max-jobs", "5",
           QLESS_TEST_DB=str(tmp_path / "db.sqlite3"), QLESS_TEST_TMP=str(tmp_path),
           QLESS_TEST_SIGNAL_LOG=str(log))
    assert flaky.result() == "ok after 2"
    pids = {q.result() for q in queries}
    assert len(pids) == 3  # a fresh child per job, each with a working DB connection
    events = [json.loads(line) for line in log.read_text().splitlines()]
    finished = [(e["jid"], e["outcome"]) for e in events if e["signal"] == "job_finished"]
    assert (flaky.jid, "retried") in finished and (flaky.jid, "completed") in finished
    assert sorted(o for j, o in finished if j != flaky.jid) == ["completed"] * 3
    assert {e["signal"] for e in events} >= {"worker_started", "worker_stopped",
                                             "job_started", "job_finished"}
    # One sender convention (the alias); the worker's name is in the payload.
    assert {e["sender"] for e in events} == {"default"}
    started = [e for e in events if e["signal"] == "job_started" and e["jid"] == flaky.jid]
    assert [e["attempt"] for e in started] == [1, 2]
    assert started[0]["klass"] == get_client().jobs[flaky.jid].klass_name
    assert all(e["worker"] for e in events)


def test_hooks_close_db_connections_before_fork_and_around_jobs(monkeypatch):
    from django.db import connections

    from django_qless import hooks as hooks_module
    from django_qless.testing import build_job

    calls = []
    # SQLite's in-memory test database ignores close(); record the calls instead.
    monkeypatch.setattr(connections, "close_all", lambda: calls.append("close_all"))
    monkeypatch.setattr(hooks_module, "close_old_connections", lambda: calls.append("old"))
    hooks = DjangoWorkerHooks()
    connection.ensure_connection()
    hooks.before_fork()
    assert calls == ["close_all"]
    result = hooks.around_job(build_job("x.y", {}), lambda: calls.append("job") or "r")
    assert result == "r" and calls == ["close_all", "old", "job", "old"]
    with pytest.raises(ZeroDivisionError):
        hooks.around_job(build_job("x.y", {}), lambda: 1 / 0)
    assert calls[-1] == "old"


def test_print_options_masks_credentials(redis_url):
    result = manage(redis_url, "qless_worker", "reports", "emails", "--print-options",
                    "--processes", "3")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["queues"] == ["reports", "emails"] and data["processes"] == 3
    assert data["url"].startswith("unix://")


def test_queues_routed_to_several_aliases_are_refused(redis_url):
    from django.core.management import CommandError, call_command
    from django.test import override_settings

    with override_settings(QLESS={"default": {"URL": redis_url},
                                  "reports": {"URL": redis_url}, "QUEUES": {"pdf": "reports"}}):
        with pytest.raises(CommandError, match="routed to several aliases"):
            call_command("qless_worker", "default", "pdf", print_options=True)


def test_alias_connector_carries_credentials_tls_options_and_a_timeout():
    from django_qless.conf import AliasSettings
    from django_qless.management.commands.qless_worker import alias_connector

    conn = alias_connector(AliasSettings("x", "rediss://h:1/0", username="u", password="p w",
                                         ssl_ca_certs="/ca.pem"))()
    kwargs = conn.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("u", "p w")
    assert kwargs["ssl_ca_certs"] == "/ca.pem" and kwargs["ssl_cert_reqs"] == "required"
    assert kwargs["socket_timeout"] == 30.0  # a half-open connection cannot hang a worker
    assert conn.get_encoder().decode_responses


def test_worker_heartbeat_setting_and_dry_run(redis_url, tmp_path):
    handle = jobs.add.enqueue(2, b=2)
    result = manage(redis_url, "qless_worker", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "default: 1 waiting" in result.stdout and "tests.app.jobs.add" in result.stdout
    one = manage(redis_url, "qless_worker", "--dry-run", "--processes", "1")
    assert "(forking, children: 1)" in one.stdout, one.stdout  # never "1 children"
    worker(redis_url, "--processes", "0", "--max-jobs", "1",
           QLESS_WORKER_HEARTBEAT="17", QLESS_TEST_DB=str(tmp_path / "db"))
    assert get_client().config["heartbeat"] == 17
    assert jobs.add.handle(handle.jid).result() == 4


def test_worker_command_with_password_url_and_heartbeat_setting(tmp_path):
    from django_qless.core.client import Client
    from testservers.redis_server import RedisServer, find_redis_server

    server = RedisServer(find_redis_server(), extra_args=["--requirepass", "s3cret"]).start()
    try:
        url = f"unix://{server.socket_path}?db=0&password=s3cret"
        client = Client(url)
        jid = client.queues["default"].put("tests.app.jobs.add", {"args": [1], "kwargs": {"b": 2}})
        result = manage(url, "qless_worker", "default", "--processes", "0", "--max-jobs", "1",
                        QLESS_WORKER_HEARTBEAT="30", QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
        assert result.returncode == 0, result.stderr
        assert "s3cret" not in result.stdout + result.stderr
        assert client.config["heartbeat"] == 30
        assert client.jobs[jid].state == "complete"
        client.close()
    finally:
        server.stop()


def test_worker_command_has_the_core_worker_options(redis_url):
    result = manage(redis_url, "qless_worker", "default", "-n", "3", "--resume", "--name", "w1",
                    "--exec", "cat -n", "--kill-grace", "2", "--shutdown-grace", "4",
                    "--import", "tests.app.jobs", "--print-options")
    assert result.returncode == 0, result.stderr
    options = json.loads(result.stdout)
    assert options["processes"] == 3 and options["resume"] is True
    assert options["exec_command"] == ["cat", "-n"]
    assert (options["kill_grace"], options["shutdown_grace"]) == (2.0, 4.0)
    assert options["import_modules"] == ["tests.app.jobs"]
    assert options["prefetch"] is True
    off = manage(redis_url, "qless_worker", "default", "--no-prefetch", "--print-options")
    assert json.loads(off.stdout)["prefetch"] is False
    by_setting = manage(redis_url, "qless_worker", "default", "--print-options",
                        QLESS_WORKER_PREFETCH="false")
    assert json.loads(by_setting.stdout)["prefetch"] is False


def test_worker_with_events_bridges_signals_in_its_own_process(redis_url, tmp_path):
    """--with-events: a bridge process next to the worker sends job signals (here: webhooks)."""
    import http.server
    import threading

    posted: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        handle = jobs.add.using(track=True).enqueue(2, b=3)
        result = manage(redis_url, "qless_worker", "default", "--processes", "0", "--max-jobs",
                        "1", "--with-events", QLESS_TEST_DB=str(tmp_path / "db.sqlite3"),
                        QLESS_TEST_WEBHOOK=f"http://127.0.0.1:{server.server_port}/hook",
                        QLESS_WORKER_INTERVAL="0.2")
        assert result.returncode == 0, result.stderr
        assert handle.result() == 5
    finally:
        server.shutdown()
        server.server_close()
    # The bridge is stopped when the worker exits, so its webhook POST happened before.
    assert [(p["event"], p["jid"]) for p in posted] == [("completed", handle.jid)]


def test_worker_command_exits_1_when_redis_stays_unreachable_past_the_start_timeout(tmp_path):
    dead = f"unix://{tmp_path / 'nobody-listens.sock'}"
    by_option = manage(dead, "qless_worker", "default", "-p", "0", "--start-timeout", "0.5",
                       timeout=30)
    assert by_option.returncode == 1, by_option.stderr
    assert "giving up" in by_option.stderr
    by_setting = manage(dead, "qless_worker", "default", "-p", "0", timeout=30,
                        QLESS_WORKER_START_TIMEOUT="0")
    assert by_setting.returncode == 1, by_setting.stderr
    assert "after 0s" in by_setting.stderr


def test_worker_command_max_jobs_bounds_all_children_together(redis_url, tmp_path):
    client = get_client()
    handles = [jobs.add.enqueue(i, b=1) for i in range(30)]
    worker(redis_url, "default", "-p", "2", "--max-jobs", "3",
           QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
    found = client.jobs.get_many(*[h.jid for h in handles])
    popped = [j for j in found if any(h["what"] == "popped" for h in j.history)]
    assert len(popped) == 3 and all(j.state == "complete" for j in popped)


def test_worker_command_logs_a_scheduled_retry_as_one_plain_line(redis_url, tmp_path):
    flaky = jobs.flaky.enqueue(1, "log")
    result = worker(redis_url, "default", "-p", "0", "--max-jobs", "2",
                    QLESS_TEST_DB=str(tmp_path / "db.sqlite3"), QLESS_TEST_TMP=str(tmp_path))
    assert flaky.result() == "ok after 2"
    about_retry = [line for line in result.stderr.splitlines()
                   if flaky.jid in line and "done in" not in line]
    assert len(about_retry) == 1 and "retried in" in about_retry[0], result.stderr
    assert "Traceback" not in result.stderr and "RetryScheduled" not in result.stderr


def test_worker_start_line_names_the_alias_and_the_job_kinds_it_does_not_serve(redis_url):
    result = manage(redis_url, "qless_worker", "default", "emails", "-p", "0",
                    "--max-duration", "0.3", "--reap-interval", "0")
    assert result.returncode == 0, result.stderr
    [line] = [x for x in result.stderr.splitlines() if " starting: " in x]
    assert " INFO " in line and "starting: serial, queues default,emails, Redis " in line
    assert line.endswith(" (QLESS alias 'default')"), line
    [warning] = [x for x in result.stderr.splitlines() if "does not serve" in x]
    assert " WARNING " in warning
    unserved = warning.split("): ", 1)[1]
    for kind in ("tests.app.jobs.echo (queue other)", "tests.app.jobs.Thumbnail (queue classes)",
                 "tests.app.tasks.urgent (queue tasks)"):
        assert kind in unserved, warning
    for served in ("tests.app.jobs.add ", "tests.app.jobs.send_mail ", "tests.app.tasks.multiply "):
        assert served not in unserved, warning


def test_worker_serving_every_queue_warns_about_no_job_kind(redis_url):
    result = manage(redis_url, "qless_worker", "*", "--alias", "default", "-p", "0",
                    "--max-duration", "0.3", "--reap-interval", "0")
    assert result.returncode == 0, result.stderr
    assert "does not serve" not in result.stderr
    assert "queues * (now " in result.stderr


def test_worker_command_keeps_a_health_file_the_probe_reads(redis_url, tmp_path):
    import signal
    import subprocess
    import sys

    from tests.app.helpers import ROOT, spawn
    from tests.helpers import wait_until

    path = tmp_path / "health"
    proc = spawn(redis_url, "qless_worker", "default", "-p", "1", "--health-file", str(path))
    try:
        wait_until(lambda: path.exists() and json.loads(path.read_text())["state"] == "ready",
                   timeout=30)
        ready = subprocess.run([sys.executable, "-m", "django_qless.core.probe", str(path),
                                "--ready"], cwd=ROOT, capture_output=True, text=True, check=False)
        assert ready.returncode == 0 and " is ready " in ready.stdout, ready.stderr
        proc.send_signal(signal.SIGQUIT)
        assert proc.wait(timeout=30) == 0
        assert not path.exists()
    finally:
        proc.kill()
        proc.communicate()
