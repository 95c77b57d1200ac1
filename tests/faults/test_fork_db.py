"""200 forks from a supervisor that uses the Django ORM between forks.

The real `qless_worker` management command (through tests.faults.fork_db_worker, which is
manage.py plus an ORM query in the supervisor after every fork and a record of its
connections around `before_fork`) runs 200 jobs with `--fork-per-job` on a SQLite file
database. Every child writes through the ORM. Expected: every job completes in its own
child, no database error anywhere, the supervisor's connection was open before each fork
(the trigger is present) and closed by the hook before the fork, and it still works at exit.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.app.helpers import ROOT, command_env, manage
from tests.faults.fork_db_worker import QUEUE, make_user

JOBS = 200
BAD_OUTPUT = ("database is locked", "ssl error", "unexpected eof", "decryption failed",
              "operationalerror", "interfaceerror", "databaseerror", "traceback")

pytestmark = [pytest.mark.fault, pytest.mark.timeout(400)]


def test_supervisor_orm_between_200_forks(qless_client, tcp_redis, tmp_path):
    db, ledger = tmp_path / "forkdb.sqlite3", tmp_path / "forkdb.jsonl"
    migrated = manage(tcp_redis.url, "migrate", "--noinput", timeout=180, QLESS_TEST_DB=str(db))
    assert migrated.returncode == 0, migrated.stderr
    jids = qless_client.queues[QUEUE].put_many(
        [{"klass": make_user.klass, "data": {"args": [n], "kwargs": {}}} for n in range(JOBS)])
    env = command_env(tcp_redis.url, QLESS_TEST_DB=str(db), FORK_DB_LEDGER=str(ledger))
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.fork_db_worker", "qless_worker", QUEUE,
         "--processes", "2", "--fork-per-job", "--max-jobs", str(JOBS)],
        cwd=ROOT, env=env, text=True, capture_output=True, timeout=360)
    output = (result.stdout + result.stderr).lower()
    assert result.returncode == 0, result.stderr[-3000:]
    assert not [bad for bad in BAD_OUTPUT if bad in output], result.stderr[-3000:]

    # Every job completed, each in its own forked child, each writing through the ORM.
    states = {qless_client.jobs[jid].state for jid in jids}
    assert states == {"complete"}, states
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT username, first_name FROM auth_user").fetchall()
    assert sorted(u for u, _ in rows) == sorted(f"forkdb-{n}" for n in range(JOBS))
    assert len({pid for _, pid in rows}) == JOBS  # a fresh child per job

    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    forks = [e for e in events if e["ev"] == "before_fork"]
    queries = [e for e in events if e["ev"] == "parent_query"]
    errors = [e for e in events if e["ev"] == "parent_error"]
    assert not errors, errors[:3]
    assert len(forks) >= JOBS
    assert len({e["pid"] for e in forks + queries}) == 1  # all in the one supervisor
    # The supervisor had reopened its connection before every fork, and the hook closed
    # every connection before the fork happened.
    assert all(e["open_before"] for e in forks), [e for e in forks if not e["open_before"]][:3]
    assert all(e["open_after"] == [] for e in forks), [e for e in forks if e["open_after"]][:3]
    after_fork = [e for e in queries if e["when"].startswith("after fork")]
    assert len(after_fork) == len(forks)
    # The supervisor's own connection still works after 200 forks and sees every write.
    assert queries[-1]["when"] == "exit" and queries[-1]["count"] == JOBS
    print(f"\nfork and ORM: {len(forks)} forks, {len(after_fork)} supervisor ORM queries between "
          f"forks, {len({pid for _, pid in rows})} child pids, {JOBS} jobs complete")
