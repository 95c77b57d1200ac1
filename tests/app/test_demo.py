"""`scripts/demo.py --smoke` (what `make demo` runs, in CI mode) and the demo project."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.helpers import ROOT


@pytest.fixture(scope="module")
def demo() -> Any:
    """scripts/demo.py as a module (its functions, without running a demo)."""
    spec = importlib.util.spec_from_file_location("qless_demo_script", ROOT / "scripts/demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other server listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_taken_default_port_is_skipped_for_a_free_one(demo: Any, taken_port: int) -> None:
    port, note = demo.choose_port(None, default=taken_port)
    assert port != taken_port and not demo.port_taken(port)
    assert note == f"Port {taken_port} is in use, so the demo serves on port {port}."


def test_free_default_port_is_used(demo: Any) -> None:
    free = demo.free_port()
    assert demo.choose_port(None, default=free) == (free, None)


def test_taken_port_asked_for_fails_clearly_before_starting(demo: Any, taken_port: int) -> None:
    with pytest.raises(SystemExit, match=f"Port {taken_port} .* is already in use"):
        demo.choose_port(taken_port)


@pytest.mark.slow
def test_demo_smoke_fails_clearly_on_a_taken_port(taken_port: int) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    result = subprocess.run([sys.executable, "scripts/demo.py", "--smoke", "--port",
                             str(taken_port)], cwd=ROOT, env=env, text=True,
                            capture_output=True, timeout=60)
    assert result.returncode == 1
    assert "is already in use" in result.stderr and "[smoke]" not in result.stdout


@pytest.mark.slow
def test_demo_smoke_starts_everything_and_runs_a_job():
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    result = subprocess.run([sys.executable, "scripts/demo.py", "--smoke"], cwd=ROOT, env=env,
                            text=True, capture_output=True, timeout=110)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[smoke] OK" in result.stdout and "complete, result 42" in result.stdout
    assert "embedded server" in result.stdout


@pytest.mark.slow
def test_demo_smoke_uses_qless_url_when_set(redis_url):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "QLESS_URL": redis_url}
    result = subprocess.run([sys.executable, "scripts/demo.py", "--smoke"], cwd=ROOT, env=env,
                            text=True, capture_output=True, timeout=110)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "QLESS_URL from the environment" in result.stdout
