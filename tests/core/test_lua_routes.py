"""The engine's routes are generated from the Lua files' `--@` declarations (core/lua.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis

from django_qless.core.engine import lua as engine
from django_qless.core.engine.lua import EngineBuildError, build_routes, routes

__all__: list[str] = []


def sources() -> dict[str, str]:
    """Every Lua source by module name, as the build reads them."""
    return engine._read_sources()


def test_routes_cover_every_command_the_engine_defines() -> None:
    """Route exactly the commands the files register, each through its own module."""
    defined = {
        name: mod
        for mod, text in sources().items()
        for name in re.findall(r"C\['([^']+)'\] = ", text)
    }
    table = routes()
    assert set(table) == set(defined)
    for name, mod in defined.items():
        assert table[name][-1] == mod or mod in table[name], name
    # the hot path's modules (throttle, job, spawn and timers load at the branches that use
    # them: Q.need)
    assert set(table["complete.reserve"]) == {
        "samples", "objects", "complete", "queuescan", "pop", "worker",
    }


def test_every_routed_command_is_answered(lua: Any) -> None:
    """Every routed command reaches its handler; anything else is an unknown command."""
    for name in routes():
        try:
            lua(name, 0)
        except redis.ResponseError as exc:
            assert "Unknown command" not in str(exc), name
    for name in ("nope", "put.", "stats=queries", "complete.reserve "):
        with pytest.raises(redis.ResponseError, match="Unknown command"):
            lua(name, 0)


def edited(module: str, old: str, new: str) -> dict[str, str]:
    """The sources with one replacement made in one module."""
    src = sources()
    assert old in src[module]
    src[module] = src[module].replace(old, new, 1)
    return src


@pytest.mark.parametrize(("module", "old", "new", "message"), [
    ("complete", "--@ needs samples", "--@ needs samples jobs", "unknown module 'jobs'"),
    ("put", "Q.need('lists,putmove')", "Q.need('lists,putmoves')",
     "Q.need of unknown module 'putmoves'"),
    ("put", "Q.need('throttle,job')", "Q.need('throttle,handoff')",
     "loads handoff before samples, objects"),
    ("jobmeta", "--@ command log\n", "--@ command log\n--@ command put\n", "declared twice"),
    ("config", "--@ command config.get", "--@ command config.get\n--@ command config.nope",
     "does not define it"),
    ("config", "--@ command config.unset\n", "", "undeclared commands"),
    ("queuescan", "-- Commands: none", "--@ needs pop\n-- Commands: none", "need each other"),
    ("recur", "--@ command recur\n", "--@ comand recur\n", "bad declaration"),
    ("handoff", "--@ needs samples pop", "--@ needs samples pops",
     "unknown module 'pops'"),
])
def test_bad_declarations_fail_the_build(module: str, old: str, new: str, message: str) -> None:
    """Refuse an unknown module, a command declared twice or not defined, a cycle."""
    with pytest.raises(EngineBuildError, match=message):
        build_routes(edited(module, old, new))


def test_a_second_loader_in_a_file_fails_the_build() -> None:
    """One loader per file, named after the file."""
    src = edited("config", "\nQ.mod.config = function()", "\nQ.mod.cfg = function()")
    with pytest.raises(EngineBuildError, match="exactly one loader"):
        build_routes(src)
