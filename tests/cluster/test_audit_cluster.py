"""The audit of a sharded deployment on a real cluster: each shard is audited on the primary
holding it; a broken job planted in one shard is found there only and repaired in place (the
repair script runs on that primary, its prefix declared as its key); the command line audits
every shard with the same exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from django_qless.core.audit import audit, audit_all
from django_qless.core.cluster.sharded import ShardedClient
from testservers.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 4


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """Four shards over the cluster, a queue pinned to each, a job waiting in each."""
    client = ShardedClient(rc, shards=SHARDS, worker_name="w1")
    for index in range(SHARDS):
        client.placement.record(f"q{index}", index)
        client.for_queue(f"q{index}").queues[f"q{index}"].put("t.Job", {}, tags=["t"])
    yield client
    client.close()


def audit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLESS_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "django_qless.core.audit", *args], cwd=ROOT,
                          text=True, capture_output=True, timeout=120, env=env)


def test_a_broken_job_in_one_shard_is_found_there_and_fixed(cluster: LocalCluster,
                                                            sharded: ShardedClient) -> None:
    reports = audit_all(sharded)
    assert [r.shard for r in reports] == sharded.tags
    assert all(r.ok and r.jobs == 1 for r in reports), "\n".join(map(str, reports))
    broken = sharded.shard(2)
    prefix = broken.keyspace.prefix
    jid = broken.queues["q2"].peek()
    assert jid is not None
    # Lost from its queue on the primary holding shard 2: no worker would ever pop it.
    owner = cluster.primary_for_key(prefix)
    owner.conn().zrem(f"{prefix}q:q2-work", jid.jid)
    assert broken.queues["q2"].pop() is None
    reports = audit_all(sharded)
    assert [r.ok for r in reports] == [True, True, False, True]
    assert {(v.invariant, v.subject) for v in reports[2].violations} == {
        ("index.missing", jid.jid)}
    fixed = audit(broken, fix=True)
    assert fixed.ok and any(jid.jid in note for note in fixed.fixed), str(fixed)
    popped = broken.queues["q2"].pop()
    assert popped is not None and popped.jid == jid.jid
    assert all(r.ok for r in audit_all(sharded))


def test_a_ghost_index_entry_is_dropped_by_the_repair_on_its_primary(
        cluster: LocalCluster, sharded: ShardedClient) -> None:
    shard = sharded.shard(1)
    prefix = shard.keyspace.prefix
    cluster.primary_for_key(prefix).conn().zadd(f"{prefix}t:t", {"ghost": 1})
    report = audit(shard)
    assert ("index.ghost", f"{prefix}t:t ghost") in {
        (v.invariant, v.subject) for v in report.violations}, str(report)
    assert audit(shard, fix=True).ok
    assert cluster.primary_for_key(prefix).conn().zscore(f"{prefix}t:t", "ghost") is None


def test_the_command_line_audits_every_shard(cluster: LocalCluster,
                                             sharded: ShardedClient) -> None:
    urls = ",".join(f"redis://127.0.0.1:{n.port}" for n in cluster.running()[:2])
    clean = audit_cli("--cluster", urls, "--shards", str(SHARDS))
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.count("audit of shard ") == SHARDS
    assert clean.stdout.strip().endswith(f"{SHARDS} shards, all clean")
    shard = sharded.shard(3)
    prefix = shard.keyspace.prefix
    cluster.primary_for_key(prefix).conn().zadd(f"{prefix}q:q3-work", {"ghost": 1})
    found = audit_cli("--cluster", urls, "--shards", str(SHARDS), "--json")
    assert found.returncode == 1, found.stderr
    data = json.loads(found.stdout)
    assert data["ok"] is False
    assert {tag: report["ok"] for tag, report in data["shards"].items()} == {
        tag: tag != shard.shard for tag in sharded.tags}
    fixed = audit_cli("--cluster", urls, "--shards", str(SHARDS), "--fix")
    assert fixed.returncode == 0, fixed.stdout
    assert f"dropped ghost from {prefix}q:q3-work" in fixed.stdout


def test_an_unreachable_cluster_exits_2() -> None:
    result = audit_cli("--cluster", "redis://127.0.0.1:1", "--connect-timeout", "1")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot audit" in result.stderr
