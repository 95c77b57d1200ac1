"""Run manage.py commands of the test project as real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def command_env(redis_url: str, **extra: str) -> dict[str, str]:
    """Environment for a subprocess using the test settings and the test Redis."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLESS_")}
    env.update(DJANGO_SETTINGS_MODULE="tests.app.settings", QLESS_URL=redis_url,
               PYTHONPATH=str(ROOT), **extra)
    return env


def manage(redis_url: str, *args: str, timeout: float = 60, **extra: str
           ) -> subprocess.CompletedProcess[str]:
    """Run `python -m django <args>` to completion; return the result."""
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout,
                          env=command_env(redis_url, **extra))


def spawn(redis_url: str, *args: str, **extra: str) -> subprocess.Popen[str]:
    """Start `python -m django <args>` in the background."""
    return subprocess.Popen([sys.executable, "-m", "django", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=command_env(redis_url, **extra))
