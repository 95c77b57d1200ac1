"""``manage.py qless_worker`` exit codes agree with ``qless-worker``: 2 = configuration."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from tests.app.helpers import ROOT, command_env, manage
from tests.helpers import wait_until


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["bad!queue"], {}, "argument queues"),
    (["--alias", "nope"], {}, "unknown QLESS alias 'nope'"),
    (["--reserver", "fastest"], {}, "invalid choice"),
    (["--import", "no.such.module"], {}, "no module named 'no.such.module'"),
    ([], {"QLESS_COMMIT_MODE": "bogus"}, "django_qless.E055"),
    (["--skip-checks"], {"QLESS_COMMIT_MODE": "bogus"}, "improperly configured"),
])
def test_configuration_errors_exit_2(redis_url, args, env, expected):
    result = manage(redis_url, "qless_worker", *args, "--dry-run", **env)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_redis_unreachable_at_start_exits_1_as_the_core_worker_does():
    url = f"redis://127.0.0.1:{unused_port()}/0"
    result = manage(url, "qless_worker", "--dry-run", "-p", "0")
    assert result.returncode == 1
    assert "Connection refused" in one_line(result.stderr + result.stdout)
    core = subprocess.run([sys.executable, "-m", "django_qless.core.workers", "--url", url,
                           "--dry-run", "-n", "0", "default"], cwd=ROOT, text=True,
                          capture_output=True, timeout=60)
    assert core.returncode == 1, core.stderr


def test_the_core_worker_exits_2_on_bad_options():
    core = subprocess.run([sys.executable, "-m", "django_qless.core.workers", "bad!queue"],
                          cwd=ROOT, text=True, capture_output=True, timeout=60)
    assert core.returncode == 2 and "argument queues" in core.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT],
                         ids=lambda s: s.name)
def test_a_stop_while_waiting_for_redis_exits_0(tmp_path, signum):
    """TERM, INT or QUIT before the worker handles signals itself: exit 0, said on stderr."""
    err = tmp_path / "worker.err"
    with err.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "qless_worker", "default", "-p", "0",
             "--start-timeout", "60"], cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
            stderr=sink, env=command_env(f"unix://{tmp_path / 'nobody-listens.sock'}"))
        try:
            wait_until(lambda: "waiting for Redis" in err.read_text(), timeout=30)
            proc.send_signal(signum)
            assert proc.wait(timeout=15) == 0, err.read_text()
        finally:
            proc.kill()
            proc.wait()
    assert "stopped before starting" in err.read_text()
    assert "Traceback" not in err.read_text()
