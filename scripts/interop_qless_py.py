"""Run qless-py 0.11.4's own test suite against our engine (the stock-client interop leg).

qless-py 0.11.4 is the Python qless client on PyPI. This script:

1. builds `.venv-interop` (once; rebuilt when REQUIREMENTS change) with qless-py 0.11.4 and
   the suite's test dependencies;
2. downloads the qless-py sdist into `build/interop/` and unpacks its `test/` folder, adding
   our own `common.py` and `conftest.py` from `tests/interop/` (the sdist lacks `common.py`);
3. replaces the qless-core script bundled in the installed package with our engine
   (`django_qless.core.engine.lua.script_text()`), so every call the client makes runs our Lua;
4. starts private redis-servers on unix sockets, and runs every test in its own pytest
   process, working directory and flushed Redis, two lanes in parallel (the forking tests
   leave children behind, so each test's process group is killed when it ends).

It exits 0 only when every test passes, except the allow-listed ones below, and ends with
the line `interop: N passed, M failed` (M leaves the allow-listed failures out). A test that
fails is run once more and counts as its second run (reported by name either way).

Usage: python scripts/interop_qless_py.py [--redis-server PATH] [--lanes N] [TEST_ID ...]
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from django_qless.core.engine.lua import script_text  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

VERSION = "0.11.4"
VENV = ROOT / ".venv-interop"
STAMP = VENV / ".installed-stamp"
BUILD = ROOT / "build" / "interop"
SUITE = BUILD / f"qless-py-{VERSION}" / "test"
OURS = ROOT / "tests" / "interop"
# The suite's dependencies (qless-py itself pulls in redis, hiredis, simplejson, six and
# decorator; redis-py is bounded to the majors this leg has run with). setproctitle is
# qless-py's optional "ps" extra: without it test_proctitle skips itself.
REQUIREMENTS = [f"qless-py=={VERSION}", "redis>=5,<9", "pytest", "pytest-timeout", "mock",
                "gevent", "setproctitle"]

# Tests that fail whatever engine is loaded, so they say nothing about ours:
ALLOWED_FAILURES = {
    # Compares the list of a job's dependencies with a fixed order, but the engine returns
    # the members of a Redis set, whose order is not defined.
    "test_job.py::TestJob::test_depend_undepend",
    # Expects the failure group foo-ImportError; on Python 3.6+ the import raises
    # ModuleNotFoundError, and qless-py names the group after the exception's class.
    "test_job.py::TestJob::test_no_import",
}

PER_TEST_TIMEOUT = 30  # seconds; pytest-timeout inside, a kill from outside after 2x


def log(message: str) -> None:
    """Print a progress line of this leg."""
    print(f"[interop] {message}", flush=True)


def interpreter() -> str:
    """Return a Python 3 interpreter for the venv (the suite runs fine on 3.11)."""
    return shutil.which("python3.11") or sys.executable


def build_venv() -> Path:
    """Create `.venv-interop` with qless-py and the suite's dependencies, once."""
    python = VENV / "bin" / "python"
    wanted = " ".join(REQUIREMENTS) + "\n"
    if STAMP.exists() and STAMP.read_text(encoding="utf-8") == wanted:
        return python
    log(f"building {VENV.name}")
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([interpreter(), "-m", "venv", str(VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *REQUIREMENTS], check=True)
    STAMP.write_text(wanted, encoding="utf-8")
    return python


def fetch_suite(python: Path) -> None:
    """Download the qless-py sdist (once) and lay out its test/ folder with our two files."""
    dist = BUILD / "dist"
    tarball = dist / f"qless-py-{VERSION}.tar.gz"
    if not tarball.exists():
        log(f"downloading the qless-py {VERSION} sdist")
        subprocess.run(
            [str(python), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-binary", ":all:", "-d", str(dist), f"qless-py=={VERSION}"],
            check=True,
        )
    shutil.rmtree(SUITE.parent, ignore_errors=True)
    prefix = f"qless-py-{VERSION}/test/"
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise SystemExit(f"[interop] {tarball.name} has no test/ folder")
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: no links, no paths outside
            tar.extractall(BUILD, members=members, filter="data")
        else:
            tar.extractall(BUILD, members=members)  # members: plain files under test/ only
    shutil.copy(OURS / "common.py", SUITE / "common.py")
    shutil.copy(OURS / "conftest_qless_py.py", SUITE / "conftest.py")
    # Make the suite its own pytest root: the repo's pytest settings (Django, warnings as
    # errors) are not the suite's.
    (SUITE / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")


def install_engine(python: Path) -> None:
    """Replace the qless-core script bundled in the installed qless-py with our engine."""
    where = subprocess.run(
        [str(python), "-c", "import os, qless; print(os.path.dirname(qless.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    target = Path(where) / "qless-core" / "qless.lua"
    if not target.exists():
        raise SystemExit(f"[interop] no bundled script at {target}")
    target.write_text(script_text(), encoding="utf-8")


def collect(python: Path, env: dict[str, str]) -> list[str]:
    """Return the suite's test ids (file::class::name)."""
    out = subprocess.run(
        [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=SUITE, env=env, capture_output=True, text=True, check=False,
    )
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit(f"[interop] collected no tests:\n{out.stdout}{out.stderr}")
    return ids


@dataclass
class Outcome:
    """What one test's process did."""

    test: str
    result: str  # passed, failed, skipped
    seconds: float
    output: str
    retried: bool = False


def outcome_of(code: int, output: str) -> str:
    """Read a single-test pytest run's result from its exit code and summary line."""
    lines = output.strip().splitlines()
    last = lines[-1] if lines else ""
    if code == 0:
        return "skipped" if " skipped" in last and " passed" not in last else "passed"
    return "failed"


def run_one(python: Path, test: str, server: RedisServer, env: dict[str, str]) -> Outcome:
    """Run one test in its own process group, working directory and emptied server."""
    import redis

    conn = redis.Redis(unix_socket_path=server.socket_path)
    try:
        conn.flushall()
        conn.script_flush()
    finally:
        conn.close()
    started = time.monotonic()
    # The suite writes relative paths (test/tmp, qless-py-workers/): a directory per test
    # keeps the lanes, and the tests, out of each other's files. Some tests expect an empty
    # test/tmp to be there already, as it is in a qless-py checkout.
    workdir = tempfile.mkdtemp(prefix="test-", dir=server.directory)
    os.makedirs(os.path.join(workdir, "test", "tmp"))
    proc = subprocess.Popen(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--timeout={PER_TEST_TIMEOUT}", str(SUITE / test)],
        cwd=workdir, env={**env, "QLESS_INTEROP_URL": server.url},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=2 * PER_TEST_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += "\n[interop] killed after the outer time limit"
    # Children a forking test left behind must not outlive it and touch the next test's Redis.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - started
    return Outcome(test, outcome_of(proc.returncode, output), seconds, output)


def run_all(python: Path, tests: list[str], binary: str, lanes: int) -> list[Outcome]:
    """Run the tests on `lanes` private servers in parallel; return outcomes in test order."""
    todo: queue.Queue[str] = queue.Queue()
    for test in tests:
        todo.put(test)
    results: dict[str, Outcome] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "QLESS_"))}

    def lane() -> None:
        with RedisServer(binary) as server:
            while True:
                try:
                    test = todo.get_nowait()
                except queue.Empty:
                    return
                outcome = run_one(python, test, server, env)
                if outcome.result == "failed" and test not in ALLOWED_FAILURES:
                    # Several tests give a forked worker one second to finish a job, which a
                    # loaded machine can miss: a second run tells that from a real failure.
                    log(f"retrying {test} ({outcome.seconds:.1f}s)")
                    first = outcome
                    outcome = run_one(python, test, server, env)
                    outcome.retried = True
                    if outcome.result == "failed":
                        outcome.output = f"{first.output.rstrip()}\n[interop] and again:\n" \
                            + outcome.output
                results[test] = outcome
                if outcome.result == "failed" and test not in ALLOWED_FAILURES:
                    log(f"FAILED {test} ({outcome.seconds:.1f}s)")

    threads = [threading.Thread(target=lane) for _ in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    missing = [t for t in tests if t not in results]
    if missing:
        raise SystemExit(f"[interop] tests not run (a lane died): {missing}")
    return [results[t] for t in tests]


def report(outcomes: list[Outcome], verbose: bool, started: float) -> int:
    """Print failures and the summary line; return the exit code."""
    failed = [o for o in outcomes if o.result == "failed" and o.test not in ALLOWED_FAILURES]
    allowed = [o for o in outcomes if o.result == "failed" and o.test in ALLOWED_FAILURES]
    passed = [o for o in outcomes if o.result == "passed"]
    skipped = [o for o in outcomes if o.result == "skipped"]
    for o in failed:
        print(f"\n[interop] ---- {o.test} ----\n{o.output.rstrip()}", flush=True)
    if verbose:
        for o in sorted(outcomes, key=lambda o: -o.seconds)[:10]:
            log(f"{o.seconds:5.1f}s {o.result:7} {o.test}")
    for o in allowed:
        log(f"allowed failure (not the engine's): {o.test}")
    for o in outcomes:
        if o.retried and o.result != "failed":
            log(f"{o.result} when run again (failed the first time): {o.test}")
    for o in failed:
        log(f"failed: {o.test}")
    log(f"wall time {time.monotonic() - started:.0f}s")
    tail = f", {len(skipped)} skipped" if skipped else ""
    print(f"interop: {len(passed)} passed, {len(failed)} failed{tail}", flush=True)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--redis-server", help="redis-server binary (default: as tests find it)")
    parser.add_argument("--lanes", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--verbose", action="store_true", help="list the slowest tests")
    parser.add_argument("tests", nargs="*", help="test ids (default: the whole suite)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    python = build_venv()
    fetch_suite(python)
    install_engine(python)
    binary = args.redis_server or find_redis_server()
    tests = args.tests or collect(python, {**os.environ, "QLESS_INTEROP_URL": "unix:///nowhere"})
    log(f"{len(tests)} tests of qless-py {VERSION}, {args.lanes} lane(s), {binary}")
    outcomes = run_all(python, tests, binary, max(1, args.lanes))
    return report(outcomes, args.verbose, started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
