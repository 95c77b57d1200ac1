"""One job's path stays short: the package files a put and a serial worker run code in.

Counted by `scripts/job_path.py` (a tracer in each subprocess), as its `--list` shows them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import redis

from testservers.redis_server import RedisServer

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[2]

# The counts today; the whole path is held to 30 files. A module added to either path must
# be paid for by one taken off it.
PUT_FILES = 11
PATH_FILES = 30


def job_path_script() -> ModuleType:
    """scripts/job_path.py as a module (its functions, without running it)."""
    spec = importlib.util.spec_from_file_location("qless_job_path", ROOT / "scripts/job_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def one_job(redis_server: RedisServer) -> tuple[set[str], set[str]]:
    """The files a put and a serial worker's run of that one job entered."""
    conn = redis.Redis(unix_socket_path=redis_server.socket_path)
    conn.flushall()
    major = int(str(conn.info("server")["redis_version"]).split(".")[0])
    conn.close()
    if major < 7:  # under EVALSHA a put also builds the script bundles (engine/reach.py)
        pytest.skip("the path is counted where the engine runs as a Redis 7 function")
    put, worker = job_path_script().measure(redis_server.url)
    return set(put), set(worker)


def test_a_put_enters_few_files(one_job: tuple[set[str], set[str]]) -> None:
    """A put loads the client, its engine channel and the queue: no job, worker or
    integration module."""
    put, _ = one_job
    assert len(put) <= PUT_FILES, sorted(put)
    assert not [name for name in put if "/workers/" in name or "/cluster/" in name], sorted(put)


def test_one_jobs_path_enters_few_files(one_job: tuple[set[str], set[str]]) -> None:
    """A put and a serial worker running it enter at most PATH_FILES package files."""
    put, worker = one_job
    assert len(put | worker) <= PATH_FILES, sorted(put | worker)

