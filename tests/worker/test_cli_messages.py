"""What `qless-worker` says about bad command lines: usage, one line naming the option, exit 2
(real subprocesses; no Redis is reached)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from django_qless.core.worker_options import OPTIONS
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(120)

# Nothing listens there: a command line that got past its checks would wait for Redis.
URL = "redis://127.0.0.1:9/0"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m django_qless.core.workers` with `args`."""
    return subprocess.run(
        [sys.executable, "-m", "django_qless.core.workers", "--url", URL,
         "--start-timeout", "0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def assert_usage_error(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("usage: qless-worker"), result.stderr
    assert lines[-1] == f"qless-worker: error: {message}", result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("queues", [[""], [" , "], []], ids=["empty", "separators", "none"])
def test_no_queue_prints_usage_and_exits_2(queues: list[str]) -> None:
    assert_usage_error(run_cli(*queues), "argument queues: no queues given")


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_zero_interval_is_refused_naming_the_option(value: str) -> None:
    result = run_cli("--interval", value, "q")
    assert_usage_error(result, f"argument --interval: must be > 0, got '{value}'")


@pytest.mark.parametrize("args, message", [
    (["--shards", "0"], "argument --shards: must be in [1, 1024], got '0'"),
    (["--name", "a:b"], "argument --name: must be 1-128 printable ASCII characters "
                        "without ' ' or ':', got 'a:b'"),
], ids=["shards", "name"])
def test_out_of_range_values_name_their_option(args: list[str], message: str) -> None:
    assert_usage_error(run_cli(*args, "q"), message)


def typed_options() -> list[tuple[str, str]]:
    """Every option taking a checked value on `qless-worker`: (flag, a value it refuses)."""
    found = []
    for spec in OPTIONS:
        if spec.cli == "none" or spec.kind in ("flag", "no_flag", "choice"):
            continue
        if spec.kind in ("str", "append") and spec.parse is None:
            continue  # any text is a value (a path)
        bad = {"cluster": "http://h", "import_modules": "no.such.module", "exec_command": "'",
               "health_file": "/no/such/dir/health"}.get(spec.name, "x:y z")
        found.append((spec.flags[-1], bad))
    return found


def test_every_typed_option_names_itself_in_its_error() -> None:
    options = typed_options()
    assert len(options) >= 15, options
    procs = {flag: subprocess.Popen(
        [sys.executable, "-m", "django_qless.core.workers", flag, value, "q"], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for flag, value in options}
    for flag, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, (flag, err)
        last = err.strip().splitlines()[-1]
        named = "/".join(next(s.flags for s in OPTIONS if flag in s.flags))
        assert last.startswith(f"qless-worker: error: argument {named}: "), (flag, err)
        assert err.startswith("usage: qless-worker"), (flag, err)
