"""How a client calls the engine: FCALL of our function library on Redis 7+, EVALSHA before.

A Redis function's top level runs once per server; EVALSHA re-runs the whole ~100 KB script
body (every helper closure) on every call, which costs more Redis CPU than most commands'
own work. Both paths run the same Lua and give the same replies and events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from ..exceptions import InvalidArgument
from .lua import function_name, library_text, script_sha, script_text

__all__ = ["Invoker", "READ_ONLY_COMMANDS"]

# Commands that never write: sent to the `_ro` function (flag no-writes), so they still work
# when Redis is at maxmemory, as EVALSHA reads do. Anything else goes to the writing function.
READ_ONLY_COMMANDS = frozenset({
    "get", "multiget", "config.get", "failed", "stats", "length",
    "throttle.get", "throttle.locks", "throttle.pending", "queue.throttle.get", "recur.get",
})


def _fcall_refused(text: str) -> bool:
    """Tell whether an error reply says this server or user cannot FCALL at all."""
    lowered = text.lower()
    return "fcall" in lowered and ("unknown command" in lowered or "no permissions" in lowered)


class Invoker:
    """Build engine commands for one server and recognise "engine not loaded" replies."""

    __slots__ = ("mode", "caller_time", "keys", "bundles", "_sha", "_fn", "_fn_ro", "_shas",
                 "_texts")

    def __init__(
        self, mode: str = "auto", *, caller_time: bool = False, keys: Sequence[str] = ()
    ) -> None:
        if mode not in ("auto", "function", "script"):
            raise InvalidArgument(
                f"engine call mode must be auto, function or script, got {mode!r}"
            )
        self.mode = mode
        self.caller_time = caller_time  # the testing variant (core/engine/lua.py)
        # The keyspace's engine keys: none (default keyspace) or its prefix (keyspace.py).
        self.keys = tuple(keys)
        self._sha = script_sha(caller_time)
        self._fn = function_name(caller_time)
        self._fn_ro = f"{self._fn}_ro"
        # EVALSHA a per-command script (core/engine/bundles.py) instead of the full one: set
        # by a channel, which loads each before its command's first call (NodeChannel.prepare).
        self.bundles = False
        self._shas: dict[str, str] = {}  # command -> the sha its EVALSHA names
        self._texts: dict[str, str] = {}  # bundle sha -> its text

    @property
    def sha(self) -> str:
        """Return the SHA1 of the script this invoker calls."""
        return self._sha

    def script(self) -> str:
        """Return the script text this invoker calls."""
        return script_text(self.caller_time)

    def library(self) -> str:
        """Return the function library this invoker calls."""
        return library_text(self.caller_time)

    def command(self, argv: Sequence[Any]) -> tuple[Any, ...]:
        """Return the Redis command running the engine with `argv` (command, now, args)."""
        keys = self.keys
        if self.mode == "script":
            sha = self._shas.get(argv[0]) if self.bundles else self._sha
            if sha is None:
                sha = self._bundle(argv[0])
            return ("EVALSHA", sha, len(keys), *keys, *argv)
        name = self._fn_ro if argv[0] in READ_ONLY_COMMANDS else self._fn
        return ("FCALL", name, len(keys), *keys, *argv)

    def _bundle(self, command: Any) -> str:
        """Return the sha to EVALSHA for `command`: its bundle's, else the full script's."""
        sha = text = None
        if isinstance(command, str):
            # (loaded here: once per command, and only by a client that EVALSHAs bundles)
            from .bundles import bundle_sha, bundle_text

            sha = bundle_sha(command, self.caller_time)
            text = bundle_text(command, self.caller_time)
        if sha is None or text is None:
            sha = self._sha
        else:
            self._texts[sha] = text
        if len(self._shas) < 256:  # (command names are few; a caller's typos are not kept)
            self._shas[command] = sha
        return sha

    def script_of(self, sent: Sequence[Any]) -> str:
        """Return the text of the script that the EVALSHA command `sent` names."""
        return self._texts.get(sent[1], "") or self.script()

    @staticmethod
    def missing(exc: redis.ResponseError, sent: Sequence[Any]) -> bool:
        """Tell whether `exc`, the reply to command `sent`, means the engine was not there
        (so nothing ran). Judged by what was sent, not the current mode: another thread may
        have switched modes while this call was in flight."""
        if isinstance(exc, NoScriptError):
            return True
        if sent[0] != "FCALL":
            return False
        text = str(exc)
        return text.startswith("Function not found") or _fcall_refused(text)

    def falls_back(self, exc: redis.ResponseError) -> bool:
        """Tell whether `exc` (to FCALL or FUNCTION LOAD) means: use EVALSHA from now on."""
        text = str(exc).lower()
        return self.mode == "auto" and (
            _fcall_refused(text) or "no permissions" in text or "unknown command" in text
        )
