"""The ``@job`` enqueue layer: every bad-input case (docs/guarantees.md) that can enter it.

Each bad call goes through the real decorators (and the django.tasks backend) on a real Redis:
it must raise the typed error with a message naming the argument, before anything is sent,
and every key must DUMP the same before and after. Each case runs three ways: outside a
transaction (sent at once), inside ``transaction.atomic()`` (the error must come from the
``enqueue`` call itself, not from the commit), and in eager mode (nothing is ever sent).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.db import transaction

from django_qless.clients import get_client
from django_qless.core.exceptions import DependencyError, InvalidArgument, LimitExceeded
from django_qless.options import InvalidJobArgument
from django_qless.testing import eager
from tests.app import jobs, tasks
from tests.app.bad_input import populate
from tests.core.conftest import snapshot

try:
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
except ImportError:
    from django_tasks.exceptions import InvalidTaskError

pytestmark = pytest.mark.django_db(transaction=True)

add = jobs.add
Thumb = jobs.Thumbnail
NOW_MODES = ["immediate", "on_commit", "eager"]


def nested(depth: int) -> list[Any]:
    """Return a list nested `depth` levels deep."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def far_future() -> dt.datetime:
    return dt.datetime(2999, 1, 1, tzinfo=dt.UTC)


PRIORITY_RANGE = r"^priority must be an integer in \[-2147483648, 2147483647\]"


def row(ident: str, section: str, call: Callable[[], object], cls: type[Exception],
        match: str, *, modes: tuple[str, ...] = tuple(NOW_MODES)) -> list[Any]:
    """One case, once per mode it applies to (the id carries its case number)."""
    return [pytest.param(call, cls, match, mode, id=f"{section}-{ident}-{mode}")
            for mode in modes]


CASES: list[Any] = [
    # cases 1-4: priority
    *row("priority=high", "c1", lambda: add.using(priority="high").enqueue(1), InvalidArgument,
         r"^priority must be an integer, got 'high'$"),
    *row("priority=nan", "c2", lambda: add.using(priority=float("nan")).enqueue(1),
         InvalidArgument, r"^priority must be an integer, got nan$"),
    *[r for v in (1.5, True, "0x10", " 5 ", "1_0")
      for r in row(f"priority={v!r}", "c3", lambda v=v: add.using(priority=v).enqueue(1),
                   InvalidArgument, r"^priority must be an integer, got ")],
    *row("class.priority=1.5", "c3", lambda: Thumb.using(priority=1.5).enqueue({}),
         InvalidArgument, r"^priority must be an integer, got 1\.5$"),
    *[r for v in (2**31, -(2**31) - 1)
      for r in row(f"priority={v}", "c4", lambda v=v: add.using(priority=v).enqueue(1),
                   InvalidArgument, PRIORITY_RANGE)],
    # cases 5-7: delay (option, enqueue_in, enqueue_at)
    *row("using.delay=-5", "c5", lambda: add.using(delay=-5).enqueue(1), InvalidArgument,
         r"^delay must be >= 0, got -5$"),
    *row("enqueue_in(-5)", "c5", lambda: add.enqueue_in(-5, 1), InvalidArgument,
         r"^delay must be >= 0, got -5$"),
    *row("class.enqueue_in(-1s)", "c5", lambda: Thumb.enqueue_in(dt.timedelta(seconds=-1), {}),
         InvalidArgument, r"^delay must be >= 0, got -1"),
    *[r for v in (float("inf"), float("nan"), "1e309")
      for r in row(f"enqueue_in({v!r})", "c6", lambda v=v: add.enqueue_in(v, 1),
                   InvalidArgument, r"^delay must be finite, got ")],
    *row("using.delay=inf", "c6", lambda: add.using(delay=float("inf")).enqueue(1),
         InvalidArgument, r"^delay must be finite, got inf$"),
    *row("enqueue_in(1e12)", "c6", lambda: add.enqueue_in(1e12, 1), InvalidArgument,
         r"^delay must be at most 315360000"),
    *row("enqueue_at(2999)", "c6", lambda: add.enqueue_at(far_future(), 1), InvalidArgument,
         r"^when must be at most 315360000 seconds \(ten years\) ahead, got 2999-01-01"),
    *row("enqueue_in('abc')", "c7", lambda: add.enqueue_in("abc", 1), InvalidArgument,
         r"^delay must be a number, got 'abc'$"),
    *row("using.delay='abc'", "c7", lambda: add.using(delay="abc").enqueue(1), InvalidArgument,
         r"^delay must be a number, got 'abc'$"),
    *row("enqueue_at('tomorrow')", "c7", lambda: add.enqueue_at("tomorrow", 1),
         InvalidJobArgument, r"^when must be a datetime or epoch seconds, got 'tomorrow'$"),
    # cases 8-9: retries
    *row("retries=-1", "c8", lambda: add.using(retries=-1).enqueue(1), InvalidArgument,
         r"^retries must be an integer in \[0, 1000\], got -1$"),
    *row("retries='5.5'", "c9", lambda: add.using(retries="5.5").enqueue(1), InvalidArgument,
         r"^retries must be an integer, got '5\.5'$"),
    *row("retries=1e9", "c9", lambda: add.using(retries=10**9).enqueue(1), InvalidArgument,
         r"^retries must be an integer in \[0, 1000\], got 1000000000$"),
    # cases 10-11: data that is not a JSON object (job classes take a data dict)
    *row("class.data='{bad'", "c10", lambda: Thumb.enqueue("{bad"), InvalidJobArgument,
         r"job data must be a dict \(a JSON object\), got str$"),
    *row("class.data=[1]", "c11", lambda: Thumb.enqueue([1]), InvalidJobArgument,
         r"job data must be a dict \(a JSON object\), got list$"),
    *row("class.data=pairs", "c11", lambda: Thumb.enqueue([("width", 1)]), InvalidJobArgument,
         r"job data must be a dict \(a JSON object\), got list$"),
    # cases 12: not JSON-serialisable (datetime/Decimal/UUID become strings: documented)
    *row("arg=set", "c12", lambda: add.enqueue({1}), InvalidJobArgument,
         r"^tests\.app\.jobs\.add\(\) argument 'a' is not JSON-serialisable: .*set"),
    *row("kwarg=object", "c12", lambda: add.enqueue(1, b=object()), InvalidJobArgument,
         r"^tests\.app\.jobs\.add\(\) argument 'b' is not JSON-serialisable: .*object"),
    *row("arg=model", "c12", lambda: add.enqueue(User(username="x")), InvalidJobArgument,
         r"argument 'a' is not JSON-serialisable: .*User.*primary key"),
    *row("arg=nan", "c12", lambda: add.enqueue(float("nan")), InvalidJobArgument,
         r"argument 'a' is not JSON-serialisable: Out of range float"),
    *row("class.data=set", "c12", lambda: Thumb.enqueue({"s": {1}}), InvalidJobArgument,
         r"^tests\.app\.jobs\.Thumbnail job data is not JSON-serialisable: .*set"),
    *row("task.arg=set", "c12", lambda: tasks.multiply.enqueue({1}, 2), InvalidJobArgument,
         r"^tests\.app\.tasks\.multiply\(\) argument 'a' is not JSON-serialisable"),
    *row("task.kwarg=Decimal-in-set", "c12",
         lambda: tasks.multiply.enqueue(1, b={decimal.Decimal(1)}), InvalidJobArgument,
         r"argument 'b' is not JSON-serialisable"),
    # cases 13-14: size and depth
    *row("data=1MiB", "c13", lambda: add.enqueue("x" * (1 << 20)), LimitExceeded,
         r"^data is [0-9,]+ bytes, [0-9,]+ over the limit of 1,048,576 bytes"),
    *row("class.data=1MiB", "c13", lambda: Thumb.enqueue({"x": "x" * (1 << 20)}),
         LimitExceeded, r"^data is [0-9,]+ bytes, [0-9,]+ over the limit of 1,048,576 bytes"),
    *row("task.data=1MiB", "c13", lambda: tasks.multiply.enqueue("x" * (1 << 20), 2),
         LimitExceeded, r"^data is [0-9,]+ bytes, [0-9,]+ over the limit of 1,048,576 bytes"),
    *row("data.depth=70", "c14", lambda: add.enqueue(nested(70)), LimitExceeded,
         r"^data\['args'\]\[0\].* is nested deeper than 64 levels$"),
    *row("data.depth=100000", "c14", lambda: add.enqueue(nested(100_000)), InvalidJobArgument,
         r"argument 'a' is nested too deeply to be JSON data$"),
    # cases 15-18: jids
    *row("jid=''", "c15", lambda: add.using(jid="").enqueue(1), InvalidArgument,
         r"^jid must be a non-empty string, got ''$"),
    *[r for v in ("exists-history", "exists-dependents", "exists-dependencies")
      for r in row(f"jid={v}", "c16", lambda v=v: add.using(jid=v).enqueue(1), InvalidArgument,
                   r"^jid must not end in -history/-dependents/-dependencies")],
    # A spawn would overwrite the job: only the engine knows the recurring job exists, so the
    # refusal comes from the put (at once; after a commit it is logged, see test below).
    *row("jid=nightly-3", "c17", lambda: add.using(jid="nightly-3").enqueue(1), InvalidArgument,
         r"^Put\(\): Job nightly-3 collides with recurring job nightly$", modes=("immediate",)),
    *[r for v in ("a:b", "a b", "x" * 65, "\u00e9", "a\x00b", "a\ud800")
      for r in row(f"jid={v[:6]!r}", "c18", lambda v=v: add.using(jid=v).enqueue(1),
                   InvalidArgument, r"^jid (may only contain|must be at most 64)")],
    # cases 19-20, 50: queue names
    *row("queue=''", "c19", lambda: add.using(queue="").enqueue(1), InvalidArgument,
         r"^queue must be a non-empty string, got ''$"),
    *[r for v in ("<script>", "a'b", "a/b", "a:b", "{a}", "q" * 65)
      for r in row(f"queue={v[:8]!r}", "c20", lambda v=v: add.using(queue=v).enqueue(1),
                   InvalidArgument, r"^queue (may only contain|must be at most 64)")],
    *row("class.queue=<script>", "c20", lambda: Thumb.using(queue="<script>").enqueue({}),
         InvalidArgument, r"^queue may only contain A-Z a-z 0-9 _ \. -, got '<script>'$"),
    *[r for v in ("a\x00b", "a\ud800", "e\u0301", "a\x01")
      for r in row(f"queue={v!r}", "c50", lambda v=v: add.using(queue=v).enqueue(1),
                   InvalidArgument, r"^queue may only contain A-Z a-z 0-9 _ \. -")],
    # cases 34-35: depends
    *row("depends=self", "c34", lambda: add.using(jid="me", depends=["me"]).enqueue(1),
         InvalidArgument, r"^depends must not contain the job itself: 'me'$"),
    # Re-putting the parent so that it waits for its own dependent: only the engine sees it.
    *row("depends=cycle", "c34",
         lambda: add.using(jid="parent", depends=["child"]).enqueue(1), InvalidArgument,
         r"^Put\(\): Arg \"depends\" invalid: dependency cycle: parent would wait for itself$",
         modes=("immediate",)),
    *row("depends=1001", "c35", lambda: add.using(depends=[f"j{n}" for n in range(1001)])
         .enqueue(1), LimitExceeded, r"^depends has 1001 items, at most 1000 allowed$"),
    *row("depends='exists'", "c38", lambda: add.using(depends="exists").enqueue(1),
         InvalidJobArgument, r"^depends must be a list of strings, not a string: 'exists'$"),
    *row("depends=[1]", "c34", lambda: add.using(depends=[1]).enqueue(1), InvalidArgument,
         r"^depends item must be a non-empty string, got 1$"),
    # cases 38-39: tags
    *row("tags='abc'", "c38", lambda: add.using(tags="abc").enqueue(1), InvalidJobArgument,
         r"^tags must be a list of strings, not a string: 'abc'$"),
    *row("tags=5", "c38", lambda: add.using(tags=5).enqueue(1), InvalidJobArgument,
         r"^tags must be a list of strings, not int: 5$"),
    *row("tags=[1]", "c38", lambda: add.using(tags=[1]).enqueue(1), InvalidArgument,
         r"^tags item must be a non-empty printable string, got 1$"),
    *row("tags=51", "c39", lambda: add.using(tags=[f"t{n}" for n in range(51)]).enqueue(1),
         LimitExceeded, r"^tags has 51 items, at most 50 allowed$"),
    *[r for v in ("", "t" * 65, "a\x01", "a\nb")
      for r in row(f"tag={v[:4]!r}", "c39", lambda v=v: add.using(tags=[v]).enqueue(1),
                   InvalidArgument, r"^tags item must be")],
    # cases 40-44: recurring
    *[r for v in (0, -1, 0.001)
      for r in row(f"recur({v})", "c40/42", lambda v=v: add.recur(v, 1), InvalidArgument,
                   rf"^interval must be >= 1, got {v}$")],
    *row("recur(nan)", "c41", lambda: add.recur(float("nan"), 1), InvalidArgument,
         r"^interval must be finite, got nan$"),
    *row("recur(2y)", "c42", lambda: add.recur(dt.timedelta(days=730), 1), InvalidArgument,
         r"^interval must be at most 31536000,"),
    *row("recur('abc')", "c42", lambda: add.recur("abc", 1), InvalidArgument,
         r"^interval must be a number, got 'abc'$"),
    *row("class.recur(0)", "c40", lambda: Thumb.recur(0, {}), InvalidArgument,
         r"^interval must be >= 1, got 0$"),
    *[r for v in (-1, float("nan"), 1.5)
      for r in row(f"backlog={v}", "c43", lambda v=v: add.using(backlog=v).recur(60, 1),
                   InvalidArgument, r"^backlog must be an integer")],
    *[r for v in (-1, float("nan"))
      for r in row(f"offset={v}", "c44", lambda v=v: add.using(offset=v).recur(60, 1),
                   InvalidArgument, r"^offset must be ")],
    *row("recur.jid=49", "c18", lambda: add.using(jid="r" * 49).recur(60, 1), InvalidArgument,
         r"^jid of a recurring job must be at most 48 characters"),
    # cases 51 (throttle names; a throttle's maximum cannot be set from @job)
    *[r for v in ("", "t" * 129, "a\x01")
      for r in row(f"throttle={v[:4]!r}", "c51", lambda v=v: add.using(throttles=[v]).enqueue(1),
                   InvalidArgument, r"^throttles item must be")],
    *row("throttles=11", "c51", lambda: add.using(throttles=[f"t{n}" for n in range(11)])
         .enqueue(1), LimitExceeded, r"^throttles has 11 items, at most 10 allowed$"),
    # django.tasks: its own checks first (InvalidTask), ours after
    *row("task.priority=500", "c4", lambda: tasks.multiply.using(priority=500).enqueue(1, 2),
         InvalidTaskError, r"priority must be a whole number between -100 and 100"),
    *row("task.queue=unlisted", "c20", lambda: tasks.multiply.using(queue_name="x").enqueue(1, 2),
         InvalidTaskError, r"Queue 'x' is not valid"),
    *row("task.run_after=2999", "c6",
         lambda: tasks.multiply.using(run_after=far_future()).enqueue(1, 2), InvalidArgument,
         r"^when must be at most 315360000 seconds"),
]


@pytest.fixture
def populated(r: redis.Redis) -> None:
    """A waiting job, a dependency pair, a recurring job, a failed job and a throttle."""
    populate(get_client())
    assert r.dbsize() > 10


@pytest.mark.parametrize("call,cls,match,mode", CASES)
def test_enqueue_refuses_and_writes_nothing(populated: None, r: redis.Redis,
                                            call: Callable[[], object], cls: type[Exception],
                                            match: str, mode: str) -> None:
    """The typed error, naming the argument, raised by the enqueue call; Redis unchanged."""
    before = snapshot(r)
    if mode == "on_commit":
        with transaction.atomic():
            with pytest.raises(cls, match=match):
                call()
            # Raised inside the block: the transaction commits with nothing pending.
    elif mode == "eager":
        with eager(), pytest.raises(cls, match=match):
            call()
    else:
        with pytest.raises(cls, match=match):
            call()
    assert snapshot(r) == before


def test_every_enqueue_error_is_an_invalid_argument() -> None:
    """Wrong types stay TypeErrors for old callers but are InvalidArguments too."""
    assert issubclass(InvalidJobArgument, InvalidArgument)
    assert issubclass(InvalidJobArgument, TypeError)
    assert issubclass(InvalidJobArgument, ValueError)


def test_the_same_calls_with_good_values_are_sent(populated: None, r: redis.Redis) -> None:
    """The boundaries next to the refused values are accepted (so the table can fail)."""
    client = get_client()
    handles = [
        add.using(priority=2**31 - 1).enqueue(1),
        add.using(priority=-(2**31), retries=0).enqueue(1),
        add.using(retries=1000, tags=[f"t{n}" for n in range(50)]).enqueue(1),
        add.enqueue_in(0, 1),
        add.enqueue_in(315_360_000, 1),
        add.enqueue_at(dt.datetime(2000, 1, 1, tzinfo=dt.UTC), 1),  # the past means now
        add.using(jid="j" * 64, queue="q" * 64).enqueue(1),
        add.using(depends=["exists"], throttles=["api"]).enqueue(1),
        Thumb.enqueue({"width": 1}),
        add.enqueue(decimal.Decimal("1.5")),  # sent as the string "1.5" (documented)
        add.enqueue(nested(60)),
    ]
    assert [h.status for h in handles] == ["enqueued"] * len(handles)
    assert client.jobs[handles[5].jid].state == "waiting"
    assert client.jobs[handles[4].jid].state == "scheduled"
    rec = add.using(jid="r" * 48, backlog=0, offset=0).recur(1, 2)
    assert rec.status == "recurring" and client.jobs.recurring("r" * 48) is not None
    result = tasks.multiply.enqueue(6, 7)
    assert client.jobs[result.id].state == "waiting"


def test_engine_refusal_after_commit_is_logged_and_writes_nothing(
        populated: None, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Case 17 inside a transaction: the put after the commit is refused, logged, not written."""
    before = snapshot(r)
    with caplog.at_level("ERROR", logger="django_qless"), pytest.raises(InvalidArgument,
                                                                        match="collides"):
        with transaction.atomic():
            handle = add.using(jid="nightly-3").enqueue(1)
            assert handle.status == "pending"
    assert any("enqueue after commit failed" in rec.getMessage() for rec in caplog.records)
    assert snapshot(r) == before


def test_depends_on_a_missing_job_is_refused(populated: None, r: redis.Redis) -> None:
    """Case 32: a dependency on a jid that does not exist is refused and writes nothing."""
    before = snapshot(r)
    with pytest.raises(DependencyError, match="nope"):
        add.using(depends=["nope"]).enqueue(1)
    assert snapshot(r) == before

