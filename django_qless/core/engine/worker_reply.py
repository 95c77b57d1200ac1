"""Decode the flat replies of the worker's engine calls (reserve, reserve.wait, complete.reserve).

The engine sends these as a Redis array instead of JSON (objects.lua, `Q.flat_reply`): a
header, then per job its 13 stored texts joined by U+001F (an array of them when one holds
that character). This module turns one into the job objects `get` would report for the same
jobs without their history and dependency lists (a Job loads those on first use): the same
defaults, numbers as the engine's cjson prints them (14 significant digits), tags and
throttles as lists (docs/engine.md, "The worker's replies").
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..exceptions import QlessError

__all__ = ["REPLY_SHAPE", "decode_worker_reply"]

# The header's first entry (objects.lua's Q.REPLY_SHAPE): the layout below.
REPLY_SHAPE = "qless-flat-2"
_HEADER = 4  # shape, state of the completed job, wake, worker
_FIELDS = 13  # per job, in objects.lua's Q.job_fields order
_SEP = "\x1f"  # joins a job's fields (an array instead when a field holds it)

# C's isspace, which Lua's tonumber skips around a number (Python's float() skips more).
_C_SPACE = " \t\n\v\f\r"
_PLAIN = re.compile(r"-?[0-9]+(?:\.[0-9]+)?\Z").match

# (cjson takes control characters inside strings as they are; json's strict mode refuses them)
_DECODE = json.JSONDecoder(strict=False).decode


def lua_number(text: str) -> float | None:
    """Return what Lua's `tonumber` makes of a stored text, or None where it gives nil."""
    if _PLAIN(text):
        return float(text)  # the usual texts: what the engine writes
    if not text:
        return None
    # (Lua reads the text as a C string: it ends at a NUL byte)
    s = text.split("\x00", 1)[0].strip(_C_SPACE)
    # (Python's float() also takes '_' separators and non-ASCII digits; Lua does not)
    if not s or not s.isascii() or "_" in s or s.strip() != s:
        return None
    if s.lstrip("+-")[:2].lower() == "0x":
        try:
            return float.fromhex(s)
        except ValueError:
            return None
    try:
        return float(s)
    except ValueError:
        return None


def _printed(value: float) -> int | float:
    """Return `value` as JSON text printed with %.14g decodes (cjson's number format)."""
    if not math.isfinite(value):
        raise QlessError(f"the engine cannot print the number {value!r} in a job object")
    text = f"{value:.14g}"
    if text.lstrip("-").isdigit():
        return int(text)
    return float(text)


def _stored_number(text: str) -> int | float:
    """Decode a stored number field as `job_object` reports it (0 when not a number)."""
    if len(text) <= 14 and text.isdigit() and text.isascii():
        return int(text)  # the common case: exact in 14 digits
    return _printed(lua_number(text) or 0.0)


def _reencoded(value: Any) -> Any:
    """Return a decoded JSON value as it reads after cjson decodes and encodes it again."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _printed(float(value))
    if isinstance(value, list):
        # (cjson writes an empty Lua table as an object)
        return [_reencoded(v) for v in value] if value else {}
    if isinstance(value, dict):
        return {k: _reencoded(v) for k, v in value.items()}
    return value


def _has_surrogate(value: Any) -> bool:
    """Whether a decoded value holds a lone surrogate (cjson refuses the \\u escape)."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return False


def _table(text: str) -> Any:
    """Decode a stored JSON table as the engine's pcall(cjson.decode) + encode reports it;
    None for what the engine reads as an empty table (also text that is not a table)."""
    if not text or text in ("{}", "[]"):
        return None
    try:
        value = _DECODE(text)
    except ValueError:
        return None
    if not isinstance(value, (list, dict)) or not value:
        return None
    if "\\u" in text and _has_surrogate(value):
        return None
    if isinstance(value, list) and all(type(v) is str for v in value):
        return value  # tags, throttles: already what the engine would print
    return _reencoded(value)


def _job(worker: str, f: list[str]) -> dict[str, Any]:
    """Build the lean job object of one job's fields."""
    (jid, klass, queue, expires, data, priority, tags, retries, remaining, failure, tracked,
     throttles, spawned) = f
    left = lua_number(remaining) if remaining else None
    if left is None:
        left = lua_number(retries) or 0.0
    if math.isfinite(left):
        left = float(math.floor(left))  # (job_object floors it)
    return {
        "jid": jid,
        "klass": klass,
        "state": "running",
        "queue": queue,
        "worker": worker,
        "tracked": tracked == "1",
        "priority": _stored_number(priority) if priority else 0,
        "expires": _printed(lua_number(expires) or 0.0),
        "retries": _stored_number(retries),
        "remaining": _printed(left),
        "data": data,
        "tags": (_table(tags) or []) if tags else [],
        "failure": (_table(failure) or {}) if failure else {},
        "spawned_from_jid": spawned or False,
        "throttles": (_table(throttles) or []) if throttles else [],
    }


def decode_worker_reply(reply: Any) -> dict[str, Any]:
    """Return a worker call's reply as {"state"?, "jobs": [job objects], "wake"?}.

    "state" is there for complete.reserve only, "wake" (seconds, -1 for nothing due) only
    when no job came. A reply of any other shape (an engine this package did not load) is
    refused with QlessError, never guessed at.
    """
    if not isinstance(reply, list) or len(reply) < _HEADER or reply[0] != REPLY_SHAPE:
        shown = repr(reply)[:80]
        raise QlessError(
            f"the engine replied in a shape this client does not know ({shown}): "
            f"expected a {REPLY_SHAPE!r} array (engine and client must be the same version)")
    state, wake, worker = reply[1], reply[2], reply[3]
    out: dict[str, Any] = {}
    if state:
        out["state"] = state
    jobs: list[dict[str, Any]] = []
    out["jobs"] = jobs
    for entry in reply[_HEADER:]:
        fields = entry.split(_SEP) if isinstance(entry, str) else entry
        if not isinstance(fields, list) or len(fields) != _FIELDS:
            raise QlessError(f"malformed {REPLY_SHAPE!r} reply: a job entry {entry!r:.80}")
        jobs.append(_job(worker, fields))
    if wake != "":
        out["wake"] = _printed(lua_number(wake) or 0.0)
    return out
