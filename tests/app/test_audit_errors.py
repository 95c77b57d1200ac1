"""`manage.py qless_audit` when nothing can be audited: one line, exit code 2."""

from __future__ import annotations

import socket

from tests.app.helpers import manage


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_redis_is_one_line_and_exit_2():
    result = manage(f"redis://127.0.0.1:{unused_port()}/0", "qless_audit")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot audit alias 'default'" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_alias_is_one_line_and_exit_2(redis_url):
    result = manage(redis_url, "qless_audit", "--alias", "nope")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown QLESS alias 'nope'" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_clean_database_from_a_real_subprocess(redis_url):
    result = manage(redis_url, "qless_audit")
    assert result.returncode == 0, result.stderr
    assert "0 violations" in result.stdout
