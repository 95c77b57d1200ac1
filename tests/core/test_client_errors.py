"""Error replies become typed exceptions whose text is the Lua's own message."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
import redis

from django_qless.core import Client
from django_qless.core.exceptions import (
    DependencyError,
    InvalidArgument,
    InvalidStateTransition,
    JobNotFound,
    LimitExceeded,
    LostLockError,
    QlessConnectionError,
    QlessError,
    ScriptError,
    error_from_reply,
    strip_script_error,
)

SHA = "c78959be705c6182b243f895599d94d84f7924f4"
MSG = "Complete(): Job jid is not currently running: waiting"

# Both wrappings as redis-py hands them over (the leading "ERR " already removed).
WRAPPED = [
    f"user_script:1234: {MSG} script: {SHA}, on @user_script:1234.",
    f"Error running script (call to f_{SHA}): @user_script:1234: user_script:1234: {MSG}",
    f"ERR user_script:7: {MSG} script: {SHA}, on @user_script:7.",
    f"ERR Error running script (call to f_{SHA}): @user_script:7: user_script:7: {MSG}",
    f"user_function:100: {MSG} script: djqless_1630bd77af1c67a0, on @user_function:100.",
    f"ERR user_function:9: {MSG} script: djqless_1630bd77af1c67a0_ro, on @user_function:9.",
]


@pytest.mark.parametrize("text", WRAPPED)
def test_strip_both_redis_wrappers(text: str) -> None:
    assert strip_script_error(text) == MSG
    err = error_from_reply(redis.ResponseError(text))
    assert isinstance(err, LostLockError)
    assert str(err) == MSG


def test_strip_keeps_unwrapped_text() -> None:
    assert strip_script_error("Foo(): bar") == "Foo(): bar"
    assert strip_script_error(f"multi\nline script: {SHA}, on @user_script:3.") == "multi\nline"


@pytest.mark.parametrize(
    ("message", "cls"),
    [
        ("Complete(): Job j has been handed out to another worker: w2", LostLockError),
        ("Heartbeat(): Job j given out to another worker: w2", LostLockError),
        ("Retry(): Job j has been given to another worker: w2", LostLockError),
        ("Fail(): Job j running with another worker: w2", LostLockError),
        ("Complete(): Job j running in another queue: q2", LostLockError),
        ("Fail(): Job jnot currently running: failed", LostLockError),
        ("Heartbeat(): Job j does not exist", JobNotFound),
        ("Fail(): Job jdoes not exist", JobNotFound),
        ("Recur(): No recurring job r", JobNotFound),
        ('Put(): Arg "priority" must be an integer in [-2147483648, 2147483647]: 1.5',
         InvalidArgument),
        ('Put(): Arg "data" too large', LimitExceeded),
        ("Cancel(): a is a dependency of b but is not mentioned to be canceled",
         DependencyError),
        ("Depends(): Job j not in the depends state: waiting", DependencyError),
        ('Recur(): Unrecognized option "tags"', InvalidArgument),
        ("Timeout(): Job j not running", InvalidStateTransition),
        ("Unknown command nope", ScriptError),
        ("attempt to index a nil value", ScriptError),
    ],
)
def test_classification(message: str, cls: type[QlessError]) -> None:
    for text in (f"user_script:9: {message} script: {SHA}, on @user_script:9.",
                 f"Error running script (call to f_{SHA}): @user_script:9: user_script:9: "
                 f"{message}"):
        err = error_from_reply(redis.ResponseError(text))
        assert type(err) is cls
        assert str(err) == message


def test_job_not_found_is_a_key_error_with_plain_text() -> None:
    err = JobNotFound("Job x does not exist")
    assert isinstance(err, KeyError)
    assert str(err) == "Job x does not exist"


def test_readonly_and_busy_are_transient() -> None:
    ro = error_from_reply(redis.exceptions.ReadOnlyError("You can't write against a replica."))
    assert isinstance(ro, QlessConnectionError)
    busy = error_from_reply(redis.ResponseError("BUSY Redis is busy running a script."))
    assert isinstance(busy, QlessConnectionError)
    assert isinstance(busy, ConnectionError)


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    client = Client(redis_url, worker_name="w1", _clock=lambda: 1000.0)
    yield client
    client.close()


def test_real_errors_from_the_engine(client: Client, redis_version_info: tuple[int, ...]) -> None:
    q = client.queues["q"]
    jid = q.put("K", {}, jid="j1")
    job = client.jobs[jid]
    with pytest.raises(LostLockError) as caught:
        job.complete()
    assert str(caught.value) == "Complete(): Job j1 is not currently running: waiting"
    assert isinstance(caught.value.__cause__, redis.ResponseError)

    with pytest.raises(JobNotFound) as missing:
        client.call("heartbeat", "nope", "w1")
    assert "does not exist" in str(missing.value)
    assert "user_script" not in str(missing.value)

    with pytest.raises(InvalidArgument) as bad:
        client.call("put", "w1", "q", "j2", "K", "{}", "nan")
    assert str(bad.value).startswith("Put(): ")

    with pytest.raises(ScriptError) as unknown:
        client.call("no-such-command")
    assert str(unknown.value) == "Unknown command no-such-command"

    popped = q.pop()
    assert popped is not None
    other = Client(client.redis, worker_name="w2", _clock=lambda: 1001.0)
    with pytest.raises(LostLockError) as stolen:
        other.jobs[jid].complete()
    assert "another worker" in str(stolen.value)


def test_dependency_error_from_cancel(client: Client) -> None:
    q = client.queues["q"]
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b", depends=["a"])
    with pytest.raises(DependencyError):
        client.jobs["a"].cancel()
    assert client.jobs.get("a") is not None


def test_connection_errors_are_wrapped() -> None:
    missing = os.path.join(tempfile.mkdtemp(), "nothing.sock")
    client = Client(f"unix://{missing}", worker_name="w1")
    with pytest.raises(QlessConnectionError):
        client.queues["q"].put("K", {})
    with pytest.raises(QlessConnectionError):
        client.server_time()
    with pytest.raises(QlessConnectionError):
        client.queues["q"].put_many([{"klass": "K", "data": {}}])
    client.close()
