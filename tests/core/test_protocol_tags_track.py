"""Conformance of `tag` and `track`."""

from __future__ import annotations

from typing import Any

import pytest
import redis

__all__: list[str] = []


def put(lua: Any, jid: str = "jid", *, now: float = 0, **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", "queue", jid, "klass", {}, 0, *pairs)


# -- tag add / remove ---------------------------------------------------------------------------


def test_tag_add_returns_tags(lua: Any) -> None:
    """Return the job's tag list, order preserved, duplicates collapsed."""
    put(lua, tags=["a"])
    assert lua.json("tag", 0, "add", "jid", "b", "a", "c", "b") == ["a", "b", "c"]
    assert lua.json("get", 0, "jid")["tags"] == ["a", "b", "c"]


def test_tag_add_indexes(lua: Any, r: redis.Redis) -> None:
    """Index the jid in `ql:t:<tag>` at now and count the tag."""
    put(lua)
    lua("tag", 5, "add", "jid", "a")
    assert r.zscore("ql:t:a", "jid") == 5
    assert r.zscore("ql:tags", "a") == 1
    assert r.type("ql:t:a") == "zset"
    assert r.type("ql:tags") == "zset"


def test_fix_tag_add_counts_new_tags_only(lua: Any, r: redis.Redis) -> None:
    """Adding a tag the job already has does not count it again (docs/engine.md fix)."""
    put(lua, tags=["a"])
    lua("tag", 0, "add", "jid", "a", "a")
    assert r.zscore("ql:tags", "a") == 1


def test_tag_add_missing_job(lua: Any) -> None:
    """Refuse an unknown job."""
    with pytest.raises(redis.ResponseError, match=r"Tag\(\): Job nope does not exist"):
        lua("tag", 0, "add", "nope", "a")


def test_tag_remove(lua: Any, r: redis.Redis) -> None:
    """Drop the tags, unindex them and return the remaining list."""
    put(lua, tags=["a", "b"])
    put(lua, "other", tags=["a"])
    assert lua.json("tag", 0, "remove", "jid", "a") == ["b"]
    assert r.zrange("ql:t:a", 0, -1) == ["other"]
    assert r.zscore("ql:tags", "a") == 1


def test_tag_remove_last_is_empty_object(lua: Any) -> None:
    """Reply `{}` when no tags remain."""
    put(lua, tags=["a"])
    assert lua("tag", 0, "remove", "jid", "a") == "{}"
    assert lua.json("get", 0, "jid")["tags"] == {}


def test_fix_tag_remove_only_decrements_own_tags(lua: Any, r: redis.Redis) -> None:
    """Removing a tag the job lacks changes no count (docs/engine.md fix)."""
    put(lua, tags=["a"])
    put(lua, "other", tags=["b"])
    lua("tag", 0, "remove", "jid", "b")
    assert r.zscore("ql:tags", "b") == 1
    assert r.zrange("ql:t:b", 0, -1) == ["other"]


def test_fix_tag_count_zero_is_removed(lua: Any, r: redis.Redis) -> None:
    """A tag whose count drops to 0 leaves `ql:tags` (docs/engine.md fix)."""
    put(lua, tags=["a"])
    lua("tag", 0, "remove", "jid", "a")
    assert r.zscore("ql:tags", "a") is None
    assert not r.exists("ql:t:a")


def test_tag_remove_missing_job(lua: Any) -> None:
    """Refuse an unknown job."""
    with pytest.raises(redis.ResponseError, match="Job nope does not exist"):
        lua("tag", 0, "remove", "nope", "a")


def test_tag_bad_subcommand(lua: Any) -> None:
    """Refuse unknown sub-commands."""
    with pytest.raises(redis.ResponseError, match="First argument must be"):
        lua("tag", 0, "frob", "jid")


def test_tag_missing_subcommand(lua: Any) -> None:
    """Refuse a missing sub-command."""
    with pytest.raises(redis.ResponseError, match="Tag"):
        lua("tag", 0)


# -- tag get ------------------------------------------------------------------------------------


def test_tag_get(lua: Any) -> None:
    """List jids by ascending tag time with the total."""
    put(lua, "b", now=2, tags=["t"])
    put(lua, "a", now=1, tags=["t"])
    put(lua, "c", now=3, tags=["t"])
    assert lua.json("tag", 5, "get", "t") == {"total": 3, "jobs": ["a", "b", "c"]}


def test_tag_get_ties_by_jid(lua: Any) -> None:
    """Break equal tag times by jid."""
    for jid in ("c", "a", "b"):
        put(lua, jid, now=1, tags=["t"])
    assert lua.json("tag", 5, "get", "t")["jobs"] == ["a", "b", "c"]


def test_tag_get_paging(lua: Any) -> None:
    """Honour offset and count."""
    for n in range(5):
        put(lua, f"j{n}", now=n, tags=["t"])
    assert lua.json("tag", 5, "get", "t", 1, 2) == {"total": 5, "jobs": ["j1", "j2"]}


def test_tag_get_default_count_25(lua: Any) -> None:
    """Return 25 jids by default."""
    for n in range(30):
        put(lua, f"j{n:02d}", now=n, tags=["t"])
    got = lua.json("tag", 50, "get", "t")
    assert got["total"] == 30
    assert got["jobs"] == [f"j{n:02d}" for n in range(25)]


def test_tag_get_unknown(lua: Any) -> None:
    """An unused tag has total 0 and jobs `{}`."""
    assert lua.json("tag", 0, "get", "nothing") == {"total": 0, "jobs": {}}


# -- tag top ------------------------------------------------------------------------------------


def test_tag_top(lua: Any) -> None:
    """List tags used at least twice, most used first."""
    put(lua, "a", tags=["x", "y", "z"])
    put(lua, "b", tags=["x", "y"])
    put(lua, "c", tags=["x"])
    assert lua.json("tag", 0, "top") == ["x", "y"]


def test_tag_top_paging(lua: Any) -> None:
    """Honour offset and count."""
    for n in range(3):
        put(lua, f"j{n}", tags=["x", "y"] if n < 2 else ["x"])
    assert lua.json("tag", 0, "top", 1, 1) == ["y"]
    assert lua.json("tag", 0, "top", 0, 1) == ["x"]


def test_tag_top_empty(lua: Any) -> None:
    """Reply `{}` when no tag is used twice."""
    put(lua, tags=["once"])
    assert lua("tag", 0, "top") == "{}"


# -- track --------------------------------------------------------------------------------------


def test_track_empty(lua: Any) -> None:
    """Both lists are `{}` when nothing is tracked."""
    assert lua.json("track", 0) == {"jobs": {}, "expired": {}}


def test_track_and_list(lua: Any, r: redis.Redis) -> None:
    """Track jobs and list them in tracking order."""
    put(lua, "a")
    put(lua, "b")
    assert lua("track", 5, "track", "b") == "1"
    assert lua("track", 6, "track", "a") == "1"
    assert r.zscore("ql:tracked", "b") == 5
    tracked = lua.json("track", 7)
    assert [j["jid"] for j in tracked["jobs"]] == ["b", "a"]
    assert tracked["expired"] == {}
    assert tracked["jobs"][0]["tracked"] is True


def test_track_twice_replies_zero(lua: Any) -> None:
    """Tracking a tracked job replies "0"."""
    put(lua)
    lua("track", 0, "track", "jid")
    assert lua("track", 1, "track", "jid") == "0"


def test_untrack(lua: Any, r: redis.Redis) -> None:
    """Untrack removes the job from the list."""
    put(lua)
    lua("track", 0, "track", "jid")
    assert lua("track", 1, "untrack", "jid") == "1"
    assert r.zscore("ql:tracked", "jid") is None
    assert lua.json("get", 1, "jid")["tracked"] is False
    assert lua("track", 2, "untrack", "jid") == "0"


def test_track_subcommand_case_insensitive(lua: Any) -> None:
    """Accept TRACK / UnTrack."""
    put(lua)
    assert lua("track", 0, "TRACK", "jid") == "1"
    assert lua("track", 0, "UnTrack", "jid") == "1"


def test_track_expired(lua: Any, r: redis.Redis) -> None:
    """Report tracked jids whose job hash is gone as expired."""
    put(lua, "a")
    put(lua, "b")
    lua("track", 0, "track", "a")
    lua("track", 0, "track", "b")
    r.delete("ql:j:b")
    tracked = lua.json("track", 1)
    assert [j["jid"] for j in tracked["jobs"]] == ["a"]
    assert tracked["expired"] == ["b"]


def test_track_missing_job(lua: Any) -> None:
    """Refuse to track an unknown job."""
    with pytest.raises(redis.ResponseError, match=r"Track\(\): Job does not exist"):
        lua("track", 0, "track", "nope")


def test_track_missing_jid(lua: Any) -> None:
    """Require a jid."""
    with pytest.raises(redis.ResponseError, match=r'Track\(\): Arg "jid" missing'):
        lua("track", 0, "track")


def test_track_unknown_action(lua: Any) -> None:
    """Refuse other sub-commands."""
    put(lua)
    with pytest.raises(redis.ResponseError, match=r'Track\(\): Unknown action "follow"'):
        lua("track", 0, "follow", "jid")


def test_popped_tracked_job_says_tracked(lua: Any) -> None:
    """Job objects of tracked jobs carry tracked true everywhere."""
    put(lua)
    lua("track", 0, "track", "jid")
    assert lua.json("peek", 0, "queue", 1)[0]["tracked"] is True
    assert lua.json("pop", 0, "queue", "worker", 1)[0]["tracked"] is True
    assert lua.json("multiget", 0, "jid")[0]["tracked"] is True


def test_put_duplicate_tags_count_once(lua: Any, r: redis.Redis) -> None:
    """Duplicate tags in a put collapse (like `tag add`) and count once (docs/engine.md fix)."""
    put(lua, tags=["a", "a", "b"])
    assert lua.json("get", 0, "jid")["tags"] == ["a", "b"]
    assert r.zscore("ql:tags", "a") == 1
    lua("cancel", 1, "jid")
    assert r.zscore("ql:tags", "a") is None
