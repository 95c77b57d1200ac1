"""A Sentinel alias against a real primary + sentinel on loopback."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from django_qless.clients import get_client
from tests.app import jobs
from tests.helpers import free_port
from testservers.redis_server import RedisServer, find_redis_server


@pytest.fixture
def sentinel(tmp_path: Path):
    binary = find_redis_server()
    primary = RedisServer(binary, port=free_port()).start()
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {primary.port} 1\n")
    proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = redis.Redis(port=port)
                if conn.sentinel_get_master_addr_by_name("mymaster"):
                    conn.close()
                    break
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, "sentinel did not start"
            time.sleep(0.1)
        yield port, primary
    finally:
        proc.terminate()
        proc.wait(10)
        primary.stop()


@pytest.mark.django_db(transaction=True)
def test_jobs_go_through_a_sentinel_alias(sentinel):
    port, primary = sentinel
    with override_settings(QLESS={"default": {"SENTINELS": [("127.0.0.1", port)],
                                              "MASTER_NAME": "mymaster"}}):
        handle = jobs.add.enqueue(1, b=2)
        assert handle.status == "enqueued"
        assert get_client().jobs[handle.jid].data == {"args": [1], "kwargs": {"b": 2}}
    direct = redis.Redis(unix_socket_path=primary.socket_path, decode_responses=True)
    try:
        assert direct.hget(f"ql:j:{handle.jid}", "klass") == "tests.app.jobs.add"
    finally:
        direct.close()


@pytest.mark.django_db(transaction=True)
def test_worker_command_runs_jobs_through_a_sentinel_alias(sentinel, tmp_path):
    from tests.app.helpers import manage

    port, primary = sentinel
    with override_settings(QLESS={"default": {"SENTINELS": [("127.0.0.1", port)],
                                              "MASTER_NAME": "mymaster"}}):
        handle = jobs.add.enqueue(40, b=2)
        result = manage(primary.url, "qless_worker", "default", "--processes", "0",
                        "--max-jobs", "1", QLESS_TEST_SENTINEL=f"127.0.0.1:{port}",
                        QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
        assert result.returncode == 0, result.stderr
        assert handle.result() == 42
