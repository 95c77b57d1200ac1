"""The audit of one shard keyspace on a server that also holds the default keyspace and other
shards: every corruption planted in shard s3 is found there (subjects named with the shard's
keys) and repaired, while the default keyspace and shard s4 stay clean and untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_qless.core.audit import AuditReport, audit, audit_all
from django_qless.core.audit.fix import index_kind, plan
from django_qless.core.client import Client
from django_qless.core.engine.invoke import Keyspace
from tests.core.test_audit import CASES, NOT_FIXABLE, build_everything

PREFIX = "ql:{s3}:"


class InShard:
    """A raw connection whose `ql:` key arguments name shard s3's keys instead."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.r, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            moved = [PREFIX + a[3:] if isinstance(a, str) and a.startswith("ql:") else a
                     for a in args]
            return method(*moved, **kwargs)

        return call


@pytest.fixture
def built(redis_url: str) -> Iterator[list[tuple[Client, dict[str, str]]]]:
    """The default keyspace, shard s3 and shard s4 of one server, each with every state
    (and the jids of each, by role)."""
    made = [Client(redis_url, worker_name="w1", keyspace=tag) for tag in (None, "s3", "s4")]
    yield [(client, build_everything(client, None)) for client in made]
    for client in made:
        client.close()


@pytest.fixture
def trio(built: list[tuple[Client, dict[str, str]]]) -> tuple[Client, Client, Client]:
    """The three clients of `built`."""
    return built[0][0], built[1][0], built[2][0]


def found(report: AuditReport) -> set[tuple[str, str]]:
    """Return {(invariant, subject)} with the shard's names as default `ql:` names."""
    return {(v.invariant, v.subject.replace(PREFIX, "ql:")) for v in report.violations}


def test_each_keyspace_is_audited_alone_and_clean(trio, r) -> None:
    default, s3, s4 = trio
    reports = [audit(client) for client in trio]
    assert all(report.ok for report in reports), "\n".join(map(str, reports))
    # Each counts its own jobs only: the default's `ql:j:*` does not match `ql:{s3}:j:*`.
    assert reports[0].jobs == reports[1].jobs == reports[2].jobs > 5
    total = len(r.keys("ql:j:*")) + len(r.keys("ql:{*}:j:*"))
    assert sum(report.jobs for report in reports) < total  # (histories are keys too)
    assert [report.shard for report in reports] == [None, "s3", "s4"]
    assert "shard" not in reports[0].as_dict() and reports[1].as_dict()["shard"] == "s3"
    assert str(reports[1]).startswith("audit of shard s3: ")
    assert [report.shard for report in audit_all(s3)] == ["s3"]


@pytest.mark.parametrize("corrupt", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_a_corruption_in_one_shard_is_found_and_fixed_there(built, trio, r, corrupt) -> None:
    default, s3, s4 = trio
    expected = corrupt(InShard(r), built[1][1])
    report = audit(s3)
    assert expected <= found(report), str(report)
    assert all(v.subject.startswith(PREFIX) or not v.subject.startswith("ql:")
               for v in report.violations), str(report)
    assert audit(default).ok and audit(s4).ok
    fixed = audit(s3, fix=True)
    if corrupt.__name__ in NOT_FIXABLE:
        assert {v.invariant for v in fixed.violations} == {NOT_FIXABLE[corrupt.__name__]}
    else:
        assert fixed.ok and fixed.fixed, str(fixed)
        assert audit(s3).ok
    assert all(PREFIX in note or "ql:" not in note for note in fixed.fixed), fixed.fixed
    assert audit(default).ok and audit(s4).ok


def test_a_repaired_job_runs_again_in_its_shard(trio, r) -> None:
    default, s3, s4 = trio
    jid = s3.queues["lost"].put("t.Job", {})
    default.queues["lost"].put("t.Job", {}, jid=jid)  # the same jid in the default keyspace
    r.zrem(PREFIX + "q:lost-work", jid)  # lost from its queue: nobody would ever pop it
    assert s3.queues["lost"].pop() is None
    report = audit(s3, fix=True)
    assert report.ok and any(jid in note for note in report.fixed), str(report)
    popped = s3.queues["lost"].pop()
    assert popped is not None and popped.jid == jid
    assert default.jobs[jid].state == "waiting"  # the default keyspace's job was not touched
    assert audit(default).ok


def test_fix_plans_name_the_shard_keys() -> None:
    ks = Keyspace("s3")
    assert index_kind("ql:{s3}:q:q-work", ks) == ("work", "q")
    assert index_kind("ql:{s3}:th:ql:q:t-locks", ks) == ("thlocks", "ql:q:t")
    assert index_kind("ql:q:q-work", ks) is None  # the default's key is not the shard's
    from django_qless.core.audit import Violation

    edge = Violation("deps.symmetry", "ql:{s3}:j:a-dependencies b", "x")
    assert plan(edge, ks) == [("edge", "a", "b")]
    assert plan(Violation("tags.counter", "ql:{s3}:t:red", "x"), ks) == [("tagcount", "red")]

