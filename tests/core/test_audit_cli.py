"""`python -m django_qless.core.audit`: a real command line, run as a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]


def audit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLESS_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "django_qless.core.audit", *args], cwd=ROOT,
                          text=True, capture_output=True, timeout=60, env=env)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_help_describes_the_options_and_exit_codes():
    result = audit_cli("--help")
    assert result.returncode == 0
    for word in ("--url", "--fix", "--json", "Exit codes"):
        assert word in result.stdout


def test_clean_database_prints_the_report_and_exits_0(redis_url, client):
    client.queues["q"].put("K", {}, jid="real")
    result = audit_cli("--url", redis_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("audit: 1 job, ") and "0 violations" in result.stdout


def test_violations_exit_1_and_fix_repairs_them(redis_url, client, r: redis.Redis):
    client.queues["q"].put("K", {}, jid="real")
    r.zadd("ql:q:q-work", {"ghost": 1})
    result = audit_cli("--url", redis_url, "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["by_invariant"] == {"index.ghost": 1}
    result = audit_cli("--url", redis_url, "--fix")
    assert result.returncode == 0, result.stdout
    assert "fixed: dropped ghost from ql:q:q-work" in result.stdout
    assert r.zscore("ql:q:q-work", "ghost") is None


def test_unreachable_redis_is_one_line_and_exit_2():
    result = audit_cli("--url", f"redis://:s3cret@127.0.0.1:{unused_port()}/0")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot audit" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr


def test_bad_url_is_a_usage_error_without_echoing_it():
    result = audit_cli("--url", "http://user:s3cret@example.com/")
    assert result.returncode == 2
    assert "argument --url" in result.stderr and "s3cret" not in result.stderr
    assert "Traceback" not in result.stderr
