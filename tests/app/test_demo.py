"""`scripts/demo.py --smoke` (what `make demo` runs, in CI mode) and the demo project."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.app.helpers import ROOT


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
