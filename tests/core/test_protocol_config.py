"""Conformance of `config.get/set/unset` (docs/engine.md validation)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

__all__: list[str] = []

DEFAULTS = {
    "application": "qless",
    "heartbeat": 60,
    "grace-period": 10,
    "stats-history": 30,
    "histogram-history": 7,
    "jobs-history-count": 50000,
    "jobs-history": 604800,
}


def test_config_get_all_is_exactly_the_seven_defaults(lua: Any) -> None:
    """List exactly the seven defaults on an empty database."""
    assert lua.json("config.get", 0) == DEFAULTS


@pytest.mark.parametrize("key,value", [(k, v) for k, v in DEFAULTS.items() if k != "application"])
def test_config_get_numeric_default_is_integer(lua: Any, key: str, value: int) -> None:
    """Reply with built-in numeric defaults as integers."""
    assert lua("config.get", 0, key) == value


def test_config_get_application(lua: Any) -> None:
    """Reply with the application name as a bulk string."""
    assert lua("config.get", 0, "application") == "qless"


def test_config_get_unknown_is_nil(lua: Any) -> None:
    """Reply nil for an unknown key, including the non-default fallbacks."""
    assert lua("config.get", 0, "nope") is None
    assert lua("config.get", 0, "max-worker-age") is None


def test_config_set_returns_nil_and_stores(lua: Any, r: redis.Redis) -> None:
    """Store the value as a string in the hash `ql:config`."""
    assert lua("config.set", 0, "heartbeat", 30) is None
    assert r.hgetall("ql:config") == {"heartbeat": "30"}
    assert r.type("ql:config") == "hash"
    assert lua("config.get", 0, "heartbeat") == "30"


def test_config_get_all_overlays_stored(lua: Any) -> None:
    """Overlay stored values (strings) onto the defaults."""
    lua("config.set", 0, "heartbeat", 30)
    lua("config.set", 0, "queue-max-concurrency", 2)
    assert lua.json("config.get", 0) == {
        **DEFAULTS, "heartbeat": "30", "queue-max-concurrency": "2"}


def test_config_unset_restores_default(lua: Any, r: redis.Redis) -> None:
    """Delete the stored value; the default shows again."""
    lua("config.set", 0, "heartbeat", 30)
    assert lua("config.unset", 0, "heartbeat") is None
    assert not r.hexists("ql:config", "heartbeat")
    assert lua("config.get", 0, "heartbeat") == 60


def test_config_unset_unknown(lua: Any) -> None:
    """Unsetting an unknown key is harmless."""
    assert lua("config.unset", 0, "nope") is None
    assert lua.json("config.get", 0) == DEFAULTS


def test_config_set_event(lua: Any, events: Any) -> None:
    """Publish the exact config_set payload on ql:log."""
    lua("config.set", 0, "heartbeat", 30)
    assert events() == [("ql:log", '{"option":"heartbeat","event":"config_set","value":"30"}')]


def test_config_unset_event(lua: Any, events: Any) -> None:
    """Publish the exact config_unset payload on ql:log."""
    lua("config.unset", 0, "heartbeat")
    assert events() == [("ql:log", '{"event":"config_unset","option":"heartbeat"}')]


def test_config_set_application_string(lua: Any) -> None:
    """Non-numeric keys take any string."""
    lua("config.set", 0, "application", "mine")
    assert lua("config.get", 0, "application") == "mine"


@pytest.mark.parametrize(
    "key,value",
    [
        ("heartbeat", 1),
        ("grace-period", 0),
        ("jobs-history", 0),
        ("jobs-history-count", 0),
        ("max-job-history", 0),
        ("max-job-history", 3),
        ("queue-heartbeat", 1),
        ("queue-max-concurrency", 0),
        ("max-worker-age", 1),
        ("heartbeat", 604800),
        ("queue-heartbeat", 604800),
        ("grace-period", 86400),
        ("jobs-history", 315360000),
        ("jobs-history-count", 100000000),
        ("max-job-history", 10000),
        ("max-worker-age", 31536000),
        ("stats-history", 3650),
        ("histogram-history", 3650),
        ("queue-max-concurrency", 1000000),
    ],
)
def test_config_set_accepts_boundaries(lua: Any, key: str, value: int) -> None:
    """Accept the smallest allowed value of each validated option."""
    lua("config.set", 0, key, value)
    assert lua("config.get", 0, key) == str(value)


@pytest.mark.parametrize(
    "key,value",
    [
        ("heartbeat", 0),
        ("heartbeat", -10),
        ("heartbeat", "1.5"),
        ("heartbeat", "abc"),
        ("heartbeat", "nan"),
        ("heartbeat", "inf"),
        ("grace-period", -1),
        ("jobs-history", -1),
        ("jobs-history-count", -1),
        ("max-job-history", 1),
        ("max-job-history", 2),
        ("max-job-history", -1),
        ("queue-heartbeat", 0),
        ("queue-max-concurrency", -1),
        ("queue-max-concurrency", "x"),
        ("max-worker-age", 0),
        ("heartbeat", 99999999999),
        ("heartbeat", 604801),
        ("queue-heartbeat", 604801),
        ("grace-period", 86401),
        ("jobs-history", 315360001),
        ("jobs-history-count", 100000001),
        ("max-job-history", 10001),
        ("max-worker-age", 31536001),
        ("stats-history", 3651),
        ("histogram-history", 3651),
        ("queue-max-concurrency", 1000001),
        ("lean-job-records", 2),
    ],
)
def test_config_set_refuses(lua: Any, r: redis.Redis, events: Any, key: str, value: Any) -> None:
    """Refuse out-of-range values with a config.set() error, publishing nothing."""
    with pytest.raises(redis.ResponseError, match=r"config\.set\(\)"):
        lua("config.set", 0, key, value)
    assert not r.exists("ql:config")
    assert events() == []


def test_config_set_missing_value(lua: Any) -> None:
    """Require both key and value."""
    with pytest.raises(redis.ResponseError, match=r"config\.set\(\)"):
        lua("config.set", 0, "heartbeat")


def test_config_unset_missing_key(lua: Any) -> None:
    """Require a key."""
    with pytest.raises(redis.ResponseError, match=r"config\.unset\(\)"):
        lua("config.unset", 0)


def test_config_get_all_hides_engine_bookkeeping(lua: Any) -> None:
    """Completions and pops leave `config.get` listing only real options."""
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0)
    lua("pop", 0, "queue", "worker", 1)
    lua("complete", 1, "jid", "worker", "queue", {})
    assert lua.json("config.get", 0) == DEFAULTS


def test_lowering_max_job_history_trims_on_next_append(lua: Any) -> None:
    """A lowered cap applies at the next append: first entry plus the latest n-1."""
    for n in range(50):
        lua("put", n, "worker", "queue", "jid", "klass", {}, 0)
    lua("config.set", 0, "max-job-history", 5)
    lua("put", 50, "worker", "queue", "jid", "klass", {}, 0)
    history = lua.json("get", 51, "jid")["history"]
    assert [h["when"] for h in history] == [0, 47, 48, 49, 50]


def test_config_set_refusal_names_the_bounds(lua: Any) -> None:
    """An out-of-range value is refused with the option's range in the message."""
    with pytest.raises(redis.ResponseError,
                       match=r"heartbeat must be an integer from 1 to 604800: 99999999999"):
        lua("config.set", 0, "heartbeat", 99999999999)
