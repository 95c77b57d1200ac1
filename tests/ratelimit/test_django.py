"""`@job(rate_limit=..., rate_key=...)`: the kind's limit is defined by the enqueue and held
by the engine at pop."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_qless import job, ratelimits
from django_qless.clients import clients, get_client
from django_qless.core.scheduling.ratelimit import RateLimitError
from tests.ratelimit import jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def qless_settings(redis_url: str) -> Iterator[str]:
    """Use the flushed test database as the default alias (and forget cached clients and
    the limits this process defined: the database is new)."""
    ratelimits._defined.clear()
    with override_settings(QLESS={"default": {"URL": redis_url}}):
        yield redis_url
    clients.close_all()


def popped() -> list[str]:
    return [j.jid for j in get_client().queues["limited"].pop(10)]


def test_a_function_job_is_limited_per_value_of_its_rate_key_argument() -> None:
    a1 = jobs.charge.enqueue("a", amount=1).jid
    a2 = jobs.charge.enqueue(customer="a").jid
    a3 = jobs.charge.enqueue("a").jid
    b1 = jobs.charge.enqueue("b").jid
    assert sorted(popped()) == sorted([a1, a2, b1])
    status = get_client().rate_limits.get("kind", "tests.ratelimit.jobs.charge")
    assert status is not None and status.rate == "2/m" and status.key == "rate_key"
    assert status.used == 2 and status.keys == 2
    assert get_client().jobs.get(a3).state == "waiting"
    assert get_client().jobs.get(a3).data["rate_key"] == "a"


def test_a_kind_limit_without_a_key_and_a_class_job_keyed_by_a_data_path() -> None:
    first = jobs.ping.enqueue().jid
    jobs.ping.enqueue()
    e1 = jobs.Export.enqueue({"account": {"id": 7}}).jid
    jobs.Export.enqueue({"account": {"id": 7}})
    e3 = jobs.Export.enqueue({"account": {"id": 8}}).jid
    assert sorted(popped()) == sorted([first, e1, e3])


@pytest.mark.parametrize(("options", "text"), [
    ({"rate_limit": "ten per second"}, "is not N/unit"),
    ({"rate_limit": "0/s"}, "must be 1 to 100000"),
    ({"rate_limit": "1/0s"}, "the period must be"),
    ({"rate_key": "customer"}, "rate_key needs rate_limit"),
    ({"rate_limit": "1/s", "rate_key": "nope"}, "is not a parameter"),
    ({"rate_limit": "1/s", "rate_key": "a..b"}, "must be a dotted path"),
])
def test_bad_rate_options_are_refused_at_decoration(options: dict[str, str], text: str) -> None:
    with pytest.raises(RateLimitError, match=text):
        job(queue="limited", **options)(jobs.charge.func)


def test_a_rate_key_argument_must_be_text_or_a_number() -> None:
    with pytest.raises(RateLimitError, match="must be a string or a number"):
        jobs.charge.enqueue(["a"])


def qless_cli(*args: str) -> dict[str, object]:
    out = io.StringIO()
    call_command("qless", *args, "--json", stdout=out)
    return dict(json.loads(out.getvalue()))


def test_the_cli_sets_reads_and_clears_a_queue_limit() -> None:
    assert qless_cli("rate-limit", "get", "reports")["rate"] is None
    shown = qless_cli("rate-limit", "set", "reports", "100/m", "--key", "customer")
    assert (shown["rate"], shown["key"], shown["used"]) == ("100/m", "customer", 0)
    assert get_client().queues["reports"].rate_limit() is not None
    assert qless_cli("rate-limit", "clear", "reports")["rate"] is None
    kind = qless_cli("rate-limit", "set", "app.Mail", "5/s", "--kind")
    assert kind["scope"] == "kind" and kind["rate"] == "5/s"


@pytest.mark.parametrize(("args", "text"), [
    (("set", "reports"), "rate-limit set needs NAME RATE"),
    (("set", "reports", "5 a minute"), "is not N/unit"),
    (("set", "reports", "5/m", "--key", "a..b"), "must be a dotted path"),
    (("set", "bad queue", "5/m"), "queue"),
])
def test_the_cli_refuses_bad_input(args: tuple[str, ...], text: str) -> None:
    with pytest.raises(CommandError, match=text):
        qless_cli("rate-limit", *args)
    assert get_client().queues["reports"].rate_limit() is None
