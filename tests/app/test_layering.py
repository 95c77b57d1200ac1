"""The Django glue reaches Redis only through the core's public API.

Key names, channel names, engine command names and raw Redis commands belong to
`django_qless/core/` and `django_qless/lua/`: once queues are spread over several Redis
shards, only the core may know where a key lives. These tests scan the glue's source (every
file of the package outside those two directories) and fail on the first leak.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import django_qless
from django_qless.core.engine.lua import routes

__all__: list[str] = []

PACKAGE = Path(django_qless.__file__).resolve().parent
OWNERS = ("core", "lua")  # the only places allowed to name keys and commands

# Methods of the core Client that speak the engine's wire protocol directly.
WIRE_METHODS = frozenset({
    "call_at", "call_json", "call_replayable", "pipeline_calls", "load_script", "load_engine",
})
# Handles on the raw connection: whatever is reached through them bypasses the core.
RAW_HANDLES = frozenset({
    "redis", "connection_pool", "pubsub", "pipeline", "execute_command", "send_command",
})
# redis-py command methods (the ones that cannot be mistaken for an ordinary method name).
REDIS_COMMANDS = frozenset({
    "zcount", "zcard", "zrange", "zrangebyscore", "zrevrange", "zrevrangebyscore", "zscore",
    "zadd", "zrem", "zremrangebyscore", "zrank", "hget", "hgetall", "hmget", "hset", "hdel",
    "hkeys", "hlen", "hexists", "hincrby", "sismember", "smembers", "scard", "sadd", "srem",
    "lrange", "llen", "lpush", "rpush", "lrem", "lpop", "rpop", "publish", "subscribe",
    "psubscribe", "scan", "scan_iter", "eval", "evalsha", "fcall", "fcall_ro", "script_load",
    "function_load", "ping", "config_get", "config_set", "flushdb", "flushall", "incr",
    "incrby", "mget", "mset", "setex", "expire", "persist", "dbsize",
})
KEY_TEXT = re.compile(r"ql:")
# Per-queue option names are built by the core (Queue.heartbeat, Queue.settings(), ...).
QUEUE_OPTION_SUFFIXES = ("-heartbeat", "-max-concurrency")
# Building a connection from the QLESS settings is configuration, not data access: the
# alias factory may adjust the pool's credentials before any connection is opened.
ALLOWED = frozenset({
    ("django_qless/clients.py", "raw Redis handle .connection_pool"),
    ("django_qless/clients.py", "imports redis-py"),
    # The deploy check pings the connection the factory built and reports its RedisError.
    ("django_qless/checks.py", "imports redis-py"),
})


def engine_commands() -> frozenset[str]:
    """Return every engine command name, from the routes generated into the engine."""
    return frozenset(routes())


COMMANDS = engine_commands()


def glue_files() -> list[Path]:
    """Return the glue's source files: Python, templates and static assets."""
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE)
        if not path.is_file() or rel.parts[0] in OWNERS or "__pycache__" in rel.parts:
            continue
        if path.suffix in (".py", ".html", ".js", ".txt", ".css"):
            found.append(path)
    return found


def _receiver_text(node: ast.Attribute) -> str:
    try:
        return ast.unparse(node.value)
    except Exception:  # an exotic receiver cannot name a client
        return ""


def scan_python(source: str, name: str) -> list[str]:
    """Return the layering violations of one Python module's source."""
    problems = []
    for node in ast.walk(ast.parse(source, name)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr in RAW_HANDLES:
            problems.append(f"{where}: raw Redis handle .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in COMMANDS and "." in node.value:
                problems.append(f"{where}: engine command {node.value!r}")
            elif node.value.endswith(QUEUE_OPTION_SUFFIXES):
                problems.append(f"{where}: per-queue option name {node.value!r}")
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "redis"
                                                for a in node.names):
            problems.append(f"{where}: imports redis-py")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "redis":
            problems.append(f"{where}: imports redis-py")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        first = node.args[0] if node.args else None
        named = isinstance(first, ast.Constant) and isinstance(first.value, str)
        if method in WIRE_METHODS:
            problems.append(f"{where}: engine call .{method}()")
        elif method == "call" and (named or "client" in _receiver_text(node.func)):
            # task.call(...) of django.tasks is fine; client.call("cancel", ...) is not.
            problems.append(f"{where}: engine call .call()")
        elif method == "read" and isinstance(first, ast.Lambda):
            problems.append(f"{where}: raw read through client.read()")
        elif method in REDIS_COMMANDS:
            problems.append(f"{where}: raw Redis command .{method}()")
    return problems


def scan_text(source: str, name: str) -> list[str]:
    """Return the lines that name a key or channel (anything under the ql: prefix)."""
    return [f"{name}:{number}: key or channel name"
            for number, line in enumerate(source.splitlines(), 1) if KEY_TEXT.search(line)]


def violations() -> list[str]:
    """Scan every glue file."""
    problems = []
    for path in glue_files():
        source = path.read_text(encoding="utf-8")
        name = str(path.relative_to(PACKAGE.parent))
        problems += scan_text(source, name)
        if path.suffix == ".py":
            problems += [p for p in scan_python(source, name)
                         if (name, p.split(": ", 1)[1]) not in ALLOWED]
    return problems


def test_engine_commands_found() -> None:
    """The dispatch table parses into the commands the scanner looks for."""
    assert {"put", "throttle.get", "queue.throttle.set", "complete.reserve"} <= COMMANDS


def test_glue_files_found() -> None:
    """The scan covers the views, the commands, the templates and the top-level modules."""
    names = {str(p.relative_to(PACKAGE)) for p in glue_files()}
    for expected in ("views/throttles.py", "views/data.py", "views/live.py", "bridge.py",
                     "checks.py", "decorators.py", "clients.py", "testing.py",
                     "management/commands/qless.py", "templatetags/qless_tags.py"):
        assert expected in names
    assert any(n.endswith(".html") for n in names)
    assert not any(n.startswith(OWNERS) for n in names)


def test_glue_names_no_key_and_no_engine_command() -> None:
    """No glue file names a key, a channel, an engine command or a raw Redis command."""
    problems = violations()
    assert not problems, "the glue must go through core methods:\n" + "\n".join(problems)


@pytest.mark.parametrize("snippet", [
    'client.call("cancel", jid)',
    'client.call(command, jid)',
    'client.call_json("throttle.get", tid)',
    'client.pipeline_calls([("stats", (q, now))])',
    'client.call_at(now, "put.many")',
    'client.redis.zcount("x", 0, 1)',
    'conn.ping()',
    'pipe = r.pipeline(transaction=False)',
    'client.read(lambda r: r.zrange("x", 0, -1))',
    'ps = client.redis.pubsub(); ps.subscribe(channel)',
    'COMMAND = "queue.throttle.set"',
    'config.get(f"{name}-max-concurrency", 0)',
    "import redis",
    "from redis.lock import Lock",
])
def test_scanner_catches_wire_protocol_use(snippet: str) -> None:
    """Each way of bypassing the core is caught."""
    assert scan_python(snippet, "planted.py")


@pytest.mark.parametrize("text", ['KEY = f"ql:q:{name}"', "{# reads ql:log #}"])
def test_scanner_catches_key_names(text: str) -> None:
    """A key or channel name is caught in code, comments and templates alike."""
    assert scan_text(text, "planted")


@pytest.mark.parametrize("snippet", [
    "client.jobs.cancel(*jids)",
    "client.throttles[tid].set(maximum, ttl)",
    "task.call(*args, **kwargs)",
    "response.read()",
    "logger.info('put %s', jid)",
    "throttle.info()",
])
def test_scanner_allows_core_api(snippet: str) -> None:
    """Ordinary calls and core methods are not mistaken for wire-protocol use."""
    assert scan_python(snippet, "fine.py") == []
