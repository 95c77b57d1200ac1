"""Flows of @job functions and classes, run end to end by a real subprocess worker."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_qless.core.exceptions import InvalidArgument
from django_qless.errors import JobFailedError
from django_qless.running import eager
from django_qless.workflows import chain, chord, group
from tests.flows import jobs
from tests.flows.conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_chain_passes_each_return_value_on(redis_url, tmp_path):
    flow = chain(jobs.add.s(1, 2), jobs.times.s(10), jobs.add.s(5), jobs.constant.si("done"))
    handle = flow.enqueue()
    assert handle.status == "enqueued" and len(handle.members) == 4
    assert [m.jid for m in handle.members] == [f"{handle.id}-{i}" for i in range(4)]
    run_worker(redis_url, 4, "flows", tmp=str(tmp_path))
    state = handle.state()
    assert state.status == "complete"
    assert [m.result for m in state.members] == [3, 30, 35, "done"]
    assert handle.result(timeout=5) == "done"
    assert handle.members[2].result() == 35


def test_group_then_chord_callback_gets_every_result(redis_url, tmp_path):
    flow = chain(jobs.add.s(1),
                 chord(group(jobs.times.s(2), jobs.times.s(3), chain(jobs.add.s(10),
                                                                     jobs.times.s(2))),
                       jobs.total.s()),
                 jobs.Collect.s({"label": "end"}))
    handle = flow.enqueue()
    run_worker(redis_url, 7, "flows", "sums", tmp=str(tmp_path))
    # add(1)=1; 1*2, 1*3, (1+10)*2 -> total 2+3+22 = 27; Collect receives it.
    assert handle.result(timeout=5) == {"got": [27], "label": "end"}
    assert handle.state().members[-2].result == 27


def test_a_failure_stops_the_flow_and_retry_resumes_it(redis_url, tmp_path):
    marker = str(tmp_path / "marker")
    handle = chain(jobs.add.s(1, 1), jobs.fails_once.s(marker), jobs.times.s(7)).enqueue()
    run_worker(redis_url, 2, "flows", tmp=str(tmp_path))
    state = handle.state()
    failed = f"{handle.id}-1"
    assert state.status == f"failed at {failed}"
    assert [m.state for m in state.members] == ["complete", "failed", "depends"]
    with pytest.raises(JobFailedError) as caught:
        handle.result(timeout=0.5)
    assert caught.value.jid == failed
    assert handle.retry() == [failed]
    run_worker(redis_url, 2, "flows", tmp=str(tmp_path))
    assert handle.result(timeout=5) == 14


def test_cancel_takes_every_unfinished_member(redis_url, tmp_path):
    handle = chain(jobs.add.s(1), group(jobs.times.s(2), jobs.times.s(3)), jobs.total.s()).enqueue()
    run_worker(redis_url, 1, "flows", tmp=str(tmp_path))
    assert sorted(handle.cancel()) == [f"{handle.id}-{i}" for i in (1, 2, 3)]
    state = handle.state()
    assert state.status == "canceled"
    assert [m.state for m in state.members] == ["complete", None, None, None]


def test_flow_waits_for_the_commit_and_is_dropped_on_rollback(redis_url):
    with transaction.atomic():
        handle = chain(jobs.add.s(1), jobs.add.s(2)).enqueue()
        assert handle.status == "pending" and handle.state() is None
    assert handle.status == "enqueued" and handle.state().status == "running"
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = chain(jobs.add.s(1), jobs.add.s(2)).enqueue()
        raise RuntimeError
    assert dropped.status == "discarded" and dropped.state() is None


def test_bad_input_is_refused_before_anything_is_written(redis_url, r):
    with pytest.raises(InvalidArgument, match="a group needs at least one step"):
        group()
    with pytest.raises(InvalidArgument, match="chain part 1 must be a signature.*call .s"):
        chain(jobs.add.s(1), jobs.add)
    with pytest.raises(InvalidArgument, match="got int"):
        group(jobs.add.s(1), 5)
    with pytest.raises(InvalidArgument, match="group part 0 must be a signature.*got int"):
        group(5)
    with pytest.raises(InvalidArgument, match="a group needs at least one step"):
        chord([], jobs.total.s())
    with pytest.raises(TypeError, match="add\\(\\): missing a required argument"):
        chain(jobs.add.si(), jobs.add.s(1)).enqueue()
    with pytest.raises(TypeError, match="too many positional arguments"):
        chain(jobs.add.s(1), jobs.add.s(1, 2)).enqueue()  # the second also receives a value
    with pytest.raises(InvalidArgument, match="cannot have delay"):
        chain(jobs.add.using(delay=5).s(1)).enqueue()
    with pytest.raises(TypeError, match="JSON"):
        chain(jobs.add.s(object())).enqueue()
    assert not [k for k in r.keys("*") if k.startswith("ql:j:")]


def test_eager_mode_runs_the_flow_inline(redis_url):
    with eager():
        handle = chord([jobs.add.s(1, 1), jobs.add.s(2, 2)], jobs.total.s()).enqueue()
    assert handle.status == "eager"
    assert handle.result() == 6


def test_nested_groups_flatten_and_a_flow_ending_in_a_group_gives_a_list(redis_url):
    with eager():
        nested = chain(jobs.add.s(1, 1),
                       group(jobs.times.s(2), group(jobs.times.s(3), jobs.add.s(1))),
                       jobs.total.s()).enqueue()
        ending = group(jobs.add.s(1), jobs.add.s(2), jobs.constant.si("x")).enqueue()
    assert nested.result() == 2 * 2 + 2 * 3 + (2 + 1)
    assert ending.result() == [1, 2, "x"]


def test_aenqueue_from_async_code(redis_url):
    from asgiref.sync import async_to_sync

    handle = async_to_sync(chain(jobs.add.s(1), jobs.add.s(2)).aenqueue)()
    assert handle.status == "enqueued" and handle.state().status == "running"
