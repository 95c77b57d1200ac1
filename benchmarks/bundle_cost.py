"""Split each hot engine call's redis-server instructions into build, loaders and run.

`python benchmarks/bundle_cost.py --redis-server <binary> [--calls 100] [--mode bundle|full|fcall]`
runs redis-server under callgrind and counts, per call, the instructions of:

- `empty`: the script `return 1` (what any EVALSHA costs);
- `build:<command>`: the command's script with its entry replaced by `return 1` (the top
  level: every helper closure and constant table it builds on each EVALSHA);
- `loaders:<command>`: the same plus `Q.need` of the command's route (its module loaders);
- `<command>`: the real call (put, pop, complete, complete.reserve; config.get for scale).

`--mode bundle` calls the per-command bundles (core/lua_bundles.py), `full` the full
script, `fcall` the Redis 7 function library (no build phases: its top level runs once).
Instruction counts do not depend on the machine's load. See benchmarks/README.md,
"Redis 6.2, session 7".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import redis
from callgrind_redis import CallgrindError, callgrind_redis

from django_qless.core.engine.bundles import bundle_text
from django_qless.core.engine.lua import function_name, library_text, script_text
from django_qless.core.worker_reply import decode_worker_reply

COMMANDS = ("config.get", "put", "pop", "complete", "complete.reserve")
_ENTRY = "return main(KEYS, ARGV)\n"


def variants(command: str, mode: str = "bundle") -> dict[str, str]:
    """Return the scripts that stop after the top level ('build') and after the command's
    module loaders ('loaders'), and the command's own script ('call')."""
    text = script_text() if mode == "full" else bundle_text(command)
    if text is None or not text.endswith(_ENTRY):
        raise SystemExit(f"no script for {command}")
    top = text[: -len(_ENTRY)]
    route = f"Q.need(ROUTES:match(' {command}=(%S+)'))\n"
    return {"build": top + "return 1\n", "loaders": top + route + "return 1\n", "call": text}


def measure(binary: str, calls: int, mode: str) -> list[tuple[str, float]]:
    """Return (phase, instructions per call) for every phase, in order."""
    phases: list[tuple[str, int]] = []
    try:
        with callgrind_redis(binary, "bundle-cost-") as cg:
            r = redis.Redis(unix_socket_path=cg.sock, decode_responses=True)

            def phase(label: str, fn: Callable[[], Any], count: int) -> None:
                fn()  # not counted: the first call of a script compiles it
                cg.counting(True)
                for _ in range(count):
                    fn()
                cg.counting(False)
                cg.control("-d", label)  # dump, then zero
                phases.append((label, count))

            _run_phases(r, phase, calls, mode)
            cg.stop()
            totals = cg.dump_totals()
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    return [(label, totals.get(label, 0) / count) for label, count in phases]


def _run_phases(r: redis.Redis, phase: Callable[[str, Callable[[], Any], int], None],
                calls: int, mode: str) -> None:
    """Run the phases: the build probes, then a put / pop / complete / complete.reserve flow."""
    shas: dict[str, str] = {}
    if mode == "fcall":
        r.function_load(library_text(), replace=True)
        fn = function_name()

        def call(command: str, *args: str) -> Any:
            return r.fcall(fn, 0, command, repr(time.time()), *args)
    else:
        empty = r.script_load("return 1")
        phase("empty", lambda: r.evalsha(empty, 0), calls)
        for command in COMMANDS:
            texts = variants(command, mode)
            shas[command] = r.script_load(texts["call"])
            for kind in ("build", "loaders"):
                sha = r.script_load(texts[kind])
                phase(f"{kind}:{command}", lambda sha=sha: r.evalsha(sha, 0), calls)

        def call(command: str, *args: str) -> Any:
            return r.evalsha(shas[command], 0, command, repr(time.time()), *args)

    phase("config.get", lambda: call("config.get", "heartbeat"), calls)
    jids = iter(range(10**9))
    phase("put", lambda: call("put", "", "q", f"j{next(jids)}", "K", '{"a":1}', "0"),
          3 * calls + 5)
    held: list[tuple[str, str]] = []  # (jid, attempt token): tokens come from the worker

    def pop() -> None:
        held.append((json.loads(call("pop", "q", "w1", "1"))[0]["jid"], os.urandom(8).hex()))

    phase("pop", pop, calls + 1)

    def complete() -> None:
        jid, token = held.pop(0)
        call("complete", jid, "w1", "q", "{}", "token", token)

    phase("complete", complete, calls)

    def complete_reserve() -> None:
        jid, token = held.pop()
        reply = decode_worker_reply(
            call("complete.reserve", jid, "w1", "q", "{}", token, "1", "q"))
        held.append((reply["jobs"][0]["jid"], os.urandom(8).hex()))

    phase("complete.reserve", complete_reserve, calls)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-server", required=True)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--mode", choices=("bundle", "full", "fcall"), default="bundle")
    args = p.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("valgrind (callgrind) is needed")
    for label, per_call in measure(args.redis_server, args.calls, args.mode):
        print(f"{label:26s} {per_call:12,.0f}")


if __name__ == "__main__":
    main()
