"""A Django project whose QLESS alias is sharded over a real local cluster (3 primaries + 3
replicas, the session's Redis and Valkey clusters): checks, the client, enqueue, handles, the
tasks backend and the operator commands."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import override_settings

from django_qless.checks import check_deploy, check_settings
from django_qless.clients import clients, get_client, get_client_for_queue
from django_qless.core.client import Client
from django_qless.core.cluster.placement import shard_tag
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import QlessConnectionError
from django_qless.core.job import Job
from django_qless.testing import run_queued
from tests.app import jobs
from testservers.cluster import LocalCluster

SHARDS = 4
# Shards 0, 1 and 3 of four sit in the three primaries' slot ranges (s0 at slot 11, s1 at
# 8207, s3 at 12299): three queues pinned there land on three different servers.
PINNED = {"alpha": 0, "beta": 1, "gamma": 3}


def cluster_qless(local: LocalCluster, **extra: Any) -> dict[str, Any]:
    """The QLESS setting of a project using `local` (two of its nodes as the seed list)."""
    nodes = [f"redis://127.0.0.1:{n.port}" for n in local.running()[:2]]
    return {"default": {"CLUSTER": nodes, "SHARDS": SHARDS, "PLACEMENT": PINNED, **extra},
            "JOB_MODULES": ["tests.app.legacy_jobs"]}


@pytest.fixture(params=["redis", "valkey"])
def local(request: pytest.FixtureRequest) -> LocalCluster:
    """The session's Redis, then Valkey, cluster, whole again and flushed."""
    cluster: LocalCluster = request.getfixturevalue(f"{request.param}_cluster")
    cluster.heal()
    cluster.flush()
    return cluster


@pytest.fixture
def on_cluster(local: LocalCluster) -> Iterator[LocalCluster]:
    """QLESS's default alias points at the cluster (clients forgotten afterwards)."""
    clients.close_all()
    with override_settings(QLESS=cluster_qless(local)):
        yield local
    clients.close_all()


def test_checks_pass_on_a_good_cluster_config(on_cluster):
    assert check_settings() == []
    messages = checks.run_checks(tags=["django_qless"])
    assert [m for m in messages if m.id.startswith("django_qless")] == []


def test_deploy_check_probes_every_primary(local):
    with override_settings(QLESS=cluster_qless(local)):
        assert check_deploy() == []
    primary = local.primaries()[1]
    conn = local.client()
    node = conn.get_node(host="127.0.0.1", port=primary.port)
    try:
        conn.get_redis_connection(node).config_set("maxmemory-policy", "allkeys-lru")
        with override_settings(QLESS=cluster_qless(local)):
            found = check_deploy()
    finally:
        conn.get_redis_connection(node).config_set("maxmemory-policy", "noeviction")
        conn.close()
    assert [m.id for m in found] == ["django_qless.E082"]
    assert f"node 127.0.0.1:{primary.port}" in found[0].msg


def test_deploy_check_reports_an_unreachable_cluster():
    with override_settings(QLESS={"default": {"CLUSTER": ["redis://127.0.0.1:1"]}}):
        found = check_deploy()
    assert [m.id for m in found] == ["django_qless.E081"]


def test_deploy_flags_remote_cluster_without_password_or_tls():
    from django_qless.checks import _connection_warnings
    from django_qless.conf import get_settings

    cases = {
        ("redis://10.0.0.1:7000", "redis://10.0.0.2:7000"): {"django_qless.W083",
                                                             "django_qless.W084"},
        ("rediss://u:pw@10.0.0.1:7000",): set(),
        ("redis://127.0.0.1:7000",): set(),
    }
    for nodes, expected in cases.items():
        with override_settings(QLESS={"default": {"CLUSTER": list(nodes)}}):
            alias = get_settings().aliases["default"]
            found = _connection_warnings("default", "QLESS['default']", alias)
        assert {m.id for m in found} == expected, nodes


def stored_state(local: LocalCluster, queue: str, jid: str) -> str | None:
    """Read a job's state straight from the primary owning its queue's shard."""
    tag = shard_tag(PINNED[queue])
    owner = local.primary_for_key(f"ql:{{{tag}}}:")
    return owner.conn().hget(f"ql:{{{tag}}}:j:{jid}", "state")


def qless(*args: str) -> Any:
    """Run `manage.py qless ... --json` in this process; return the decoded output."""
    out = io.StringIO()
    call_command("qless", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def qless_text(*args: str) -> str:
    out = io.StringIO()
    call_command("qless", *args, stdout=out)
    return out.getvalue()


def test_a_cluster_alias_gives_a_sharded_client(on_cluster):
    client = get_client()
    assert isinstance(client, ShardedClient) and client.shards == SHARDS
    assert [c.shard for c in client.clients()] == [shard_tag(i) for i in range(SHARDS)]
    assert get_client_for_queue("beta") is client.shard(1)
    assert isinstance(get_client_for_queue("beta"), Client)


def test_enqueue_lands_on_each_queues_shard_and_handles_follow(on_cluster):
    handles = {q: jobs.echo.using(queue=q).enqueue(q) for q in PINNED}
    ports = {on_cluster.primary_for_key(f"ql:{{{shard_tag(i)}}}:").port
             for i in PINNED.values()}
    assert len(ports) == 3  # the three queues are on three different primaries
    for queue, handle in handles.items():
        assert handle.status == "enqueued"
        assert stored_state(on_cluster, queue, handle.jid) == "waiting"
        job = handle.get()
        assert isinstance(job, Job) and job.queue_name == queue and job.data["args"] == [queue]
        assert handle.client.shard == shard_tag(PINNED[queue]) and handle.state() == "waiting"
    assert handles["beta"].cancel() is True
    assert handles["beta"].get() is None and handles["beta"].state() is None
    assert stored_state(on_cluster, "beta", handles["beta"].jid) is None
    assert stored_state(on_cluster, "gamma", handles["gamma"].jid) == "waiting"


@pytest.mark.django_db(transaction=True)
def test_results_of_jobs_run_on_several_shards(on_cluster):
    first = jobs.add.using(queue="alpha").enqueue(2, 3)
    second = jobs.add.using(queue="beta").enqueue(5, 8)
    done = run_queued(["alpha", "beta"])
    assert sorted(o.outcome for o in done) == ["completed", "completed"]
    assert (first.result(), second.result()) == (5, 13)
    # A handle rebuilt from the jid alone names the function's default queue, whose shard
    # is not beta's: the job is found in the shard that holds it.
    rebuilt = jobs.add.handle(second.jid)
    assert rebuilt.client is not second.client
    assert rebuilt.result() == 13 and rebuilt.state() == "complete"


@pytest.mark.django_db(transaction=True)
def test_a_workflow_across_three_shards_passes_every_result(on_cluster):
    from django_qless.workflows import chain, chord, group
    from tests.flows.jobs import total

    flow = chain(chord(group(jobs.add.using(queue="alpha").s(1, 2),
                             jobs.add.using(queue="beta").s(3, 4)),
                       total.using(queue="gamma").s()),
                 jobs.add.using(queue="alpha").s(10))
    handle = flow.enqueue()
    done = run_queued(["alpha", "beta", "gamma"])
    assert [o.outcome for o in done] == ["completed"] * 4
    assert handle.result(timeout=5) == 20  # (1 + 2) + (3 + 4), then + 10
    state = handle.state()
    assert state.status == "complete"
    assert [m.queue for m in state.members] == ["alpha", "beta", "gamma", "alpha"]


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_and_unique_jobs_on_a_shard(on_cluster):
    with transaction.atomic():
        handle = jobs.echo.using(queue="gamma").enqueue("later")
        assert handle.status == "pending"
    assert handle.status == "enqueued"
    assert stored_state(on_cluster, "gamma", handle.jid) == "waiting"
    once = jobs.echo.using(queue="beta", unique=True, on_commit=False)
    assert once.enqueue("x").status == "enqueued"
    assert once.enqueue("x").status == "skipped"


def test_manage_qless_on_a_sharded_alias(on_cluster):
    a = jobs.echo.using(queue="alpha", tags=["t"]).enqueue(1)
    b = jobs.echo.using(queue="beta", tags=["t"]).enqueue(2)
    c = jobs.echo.using(queue="gamma", tags=["t"]).enqueue(3)
    stats = {row["name"]: row for row in qless("stats")}
    assert {q: stats[q]["shard"] for q in PINNED} == {
        q: shard_tag(i) for q, i in PINNED.items()}
    assert stats["beta"]["waiting"] == 1
    text = qless_text("stats").splitlines()
    assert any(line.split()[:2] == [shard_tag(3), "gamma"] for line in text), text
    assert qless("stats", "gamma")[0]["shard"] == shard_tag(3)
    assert qless("get", c.jid)["queue"] == "gamma"
    assert sorted(qless("list", "--tag", "t")["jids"]) == sorted([a.jid, b.jid, c.jid])
    assert qless("list", "--tag", "t")["total"] == 3
    assert qless("list", "beta")["jids"] == [b.jid]
    with pytest.raises(CommandError, match="cannot move between shards"):
        call_command("qless", "move", a.jid, "gamma")
    # Cancel jobs of two shards in one command: each shard cancels its own.
    assert sorted(qless("cancel", a.jid, c.jid)["canceled"]) == sorted([a.jid, c.jid])
    assert stored_state(on_cluster, "alpha", a.jid) is None
    assert stored_state(on_cluster, "beta", b.jid) == "waiting"
    # Config is per shard: a change goes to every shard, and reads agree.
    assert qless("config", "set", "heartbeat", "77") == {"heartbeat": 77}
    assert {c.config.get("heartbeat") for c in get_client().clients()} == {77}
    assert qless("config", "get", "heartbeat") == 77
    assert qless("pause", "beta") == {"paused": ["beta"]}
    assert get_client().for_queue("beta").queues["beta"].paused


@pytest.mark.django_db(transaction=True)
def test_failures_are_listed_over_every_shard(on_cluster):
    jobs.boom.using(queue="alpha").enqueue("one")
    jobs.boom.using(queue="gamma").enqueue("two")
    run_queued(["alpha", "gamma"])
    groups = qless("failed")
    assert sum(groups.values()) == 2 and len(groups) == 1
    (group,) = groups
    listed = qless("failed", group)
    assert listed["total"] == 2 and {j["queue"] for j in listed["jobs"]} == {"alpha", "gamma"}
    page = qless("list", "--state", "failed", "--group", group, "--count", "1", "--offset", "1")
    assert page["total"] == 2 and len(page["jids"]) == 1
    only = qless("list", "gamma", "--state", "failed", "--group", group)
    assert len(only["jids"]) == 1


def test_audit_of_a_sharded_alias_checks_every_shard(on_cluster):
    handles = [jobs.add.using(queue=q).enqueue(1, 2) for q in PINNED]
    out = io.StringIO()
    call_command("qless_audit", stdout=out)
    assert out.getvalue().count("audit of shard ") == SHARDS
    assert f"{SHARDS} shards, all clean" in out.getvalue()
    shard = get_client().shard(PINNED["beta"])
    prefix = shard.keyspace.prefix
    on_cluster.primary_for_key(prefix).conn().zrem(f"{prefix}q:beta-work", handles[1].jid)
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("qless_audit", "--json", stdout=out)
    assert exited.value.code == 1
    data = json.loads(out.getvalue())
    assert [tag for tag, report in data["shards"].items() if not report["ok"]] == [shard.shard]
    call_command("qless_audit", "--fix", stdout=io.StringIO())
    assert shard.queues["beta"].peek() is not None


@pytest.mark.django_db(transaction=True)
def test_tasks_backend_on_a_sharded_alias(local):
    from tests.app import tasks

    clients.close_all()
    with override_settings(QLESS=cluster_qless(local, PLACEMENT={"default": 1, "tasks": 3})):
        product = tasks.multiply.enqueue(6, 7)
        urgent = tasks.urgent.enqueue("x")
        client = get_client()
        assert client.shard(1).jobs[product.id].queue_name == "default"
        assert client.shard(3).jobs[urgent.id].queue_name == "tasks"
        # Only the result id is known: the backend finds the job in whichever shard.
        assert tasks.urgent.get_result(urgent.id).args == ["x"]
        run_queued(["default", "tasks"])
        assert tasks.multiply.get_result(product.id).return_value == 42
        assert tasks.urgent.get_result(urgent.id).return_value == "X"
    clients.close_all()


def test_an_unreachable_cluster_is_a_connection_error_everywhere():
    clients.close_all()
    with override_settings(QLESS={"default": {"CLUSTER": ["redis://127.0.0.1:1"]}}):
        with pytest.raises(QlessConnectionError, match=r"slot map of QLESS\['default'\]"):
            jobs.echo.using(queue="alpha", on_commit=False).enqueue(1)
        with pytest.raises(CommandError, match="QlessConnectionError"):
            call_command("qless", "stats")
        with pytest.raises(CommandError) as caught:
            call_command("qless_audit")
        assert caught.value.returncode == 2


# The ACL user of docs/guarantees.md, plus what a cluster client needs (docs/scaling.md).
ACL = ("on >s3cret resetkeys ~ql:* resetchannels &ql:* -@all +@read +@write +@scripting "
       "+@pubsub -@dangerous +ping +time +info +select +hello "
       "+cluster|slots +command +asking +wait")


@pytest.mark.django_db(transaction=True)
def test_a_confined_acl_user_serves_a_cluster_alias(local):
    nodes = local.running()
    for node in nodes:  # ACL users are per node: a cluster does not share them
        node.conn().execute_command("ACL", "SETUSER", "qless", *ACL.split())
    clients.close_all()
    try:
        with override_settings(QLESS=cluster_qless(local, USERNAME="qless", PASSWORD="s3cret",
                                                   DURABLE_REPLICAS=1)):
            handles = [jobs.add.using(queue=q).enqueue(1, 2) for q in PINNED]
            assert all(stored_state(local, h.queue, h.jid) == "waiting" for h in handles)
            run_queued(list(PINNED))
            assert [h.result() for h in handles] == [3, 3, 3]
        clients.close_all()
        with override_settings(QLESS=cluster_qless(local, USERNAME="qless", PASSWORD="wrong")):
            with pytest.raises(QlessConnectionError, match="(?i)invalid username-password"):
                jobs.add.using(queue="alpha", on_commit=False).enqueue(1, 2)
    finally:
        clients.close_all()
        for node in nodes:
            node.conn().execute_command("ACL", "DELUSER", "qless")


def test_a_dependency_must_share_the_dependent_jobs_shard(on_cluster):
    from django_qless.core.exceptions import QlessError

    first = jobs.echo.using(queue="alpha", on_commit=False).enqueue(1)
    same = jobs.echo.using(queue="alpha", depends=[first.jid], on_commit=False).enqueue(2)
    assert same.state() == "depends"
    # The dependency is in another shard: the put is refused, never run early.
    with pytest.raises(QlessError, match=f"dependency {first.jid} is in shard s0-320, but "
                                         f"queue 'gamma' is in shard s3-954"):
        jobs.echo.using(queue="gamma", depends=[first.jid], on_commit=False).enqueue(3)


def test_the_environment_form_through_the_commands(local):
    import subprocess
    import sys

    from tests.app.helpers import ROOT, command_env

    env = command_env("")
    del env["QLESS_URL"]
    env["DJANGO_SETTINGS_MODULE"] = "tests.app.cluster_settings"
    env["QLESS_CLUSTER"] = ",".join(f"redis://127.0.0.1:{n.port}" for n in local.running()[:2])

    def manage(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, text=True,
                              capture_output=True, timeout=60, env={**env, **extra})

    checked = manage("check", "--deploy", "--tag", "django_qless")
    assert checked.returncode == 0 and "no issues" in checked.stdout, checked.stderr
    put = manage("qless", "put", "gamma", "tests.app.jobs.echo", "--args", "[1]", "--json")
    assert put.returncode == 0, put.stderr
    jid = json.loads(put.stdout)["jid"]
    stats = manage("qless", "stats")
    assert stats.stdout.split()[:3] == [shard_tag(3), "gamma", "waiting=1"], stats.stdout
    assert json.loads(manage("qless", "get", jid, "--json").stdout)["queue"] == "gamma"
    both = manage("check", "--tag", "django_qless", QLESS_URL="redis://127.0.0.1:1/0")
    assert both.returncode == 1 and "django_qless.E113" in both.stderr


def test_a_named_throttle_is_set_in_its_home_shard_only(on_cluster):
    sharded = get_client()
    assert isinstance(sharded, ShardedClient)
    with pytest.raises(CommandError, match="no home shard yet"):
        qless("throttle", "set", "fresh", "2")
    homed = qless("throttle", "set", "fresh", "2", "--queue", "beta")
    assert homed["shard"] == shard_tag(PINNED["beta"]) and homed["maximum"] == 2
    assert qless("throttle", "get", "fresh")["shard"] == shard_tag(PINNED["beta"])
    for client in sharded.clients():  # the other shards never got a copy
        defined = client.throttles.get_many(["fresh"])[0].defined
        assert defined == (client.shard == shard_tag(PINNED["beta"]))
