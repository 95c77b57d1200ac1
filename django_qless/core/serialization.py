"""JSON encoding and the Python side of the engine's argument validation (docs/engine.md)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from typing import Any

from .exceptions import InvalidArgument, LimitExceeded

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_DATA_DEPTH",
    "MAX_DELAY",
    "MAX_INTERVAL",
    "MAX_LIST",
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "dumps",
    "dumps_data",
    "loads",
    "check_name",
    "check_jid",
    "check_recurring_jid",
    "check_worker",
    "check_klass",
    "check_text",
    "check_int",
    "check_number",
    "check_tags",
    "check_jids",
    "check_depends",
    "check_throttles",
    "num",
    "as_list",
    "check_delay",
    "put_options",
    "carry_options",
    "new_jid",
    "new_jids",
]

MAX_DATA_BYTES = 1024 * 1024
MAX_DATA_DEPTH = 64
MAX_DELAY = 315_360_000  # ten years
MAX_INTERVAL = 31_536_000  # one year
MAX_LIST = 1000
MAX_TAGS = 50
MAX_THROTTLES = 10
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_JID_SUFFIXES = ("-history", "-dependents", "-dependencies")
_INT_TEXT = re.compile(r"-?[0-9]+")
_NUM_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_SCALARS = (str, bool, int)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# _ENCODER's C encoder made once (JSONEncoder.encode makes one per call, ~1 µs of a put's
# client time): the same text, without the cycle check, so only for values _check_tree passed
# (it refuses nesting past MAX_DATA_DEPTH, so cycles). None without the C accelerator.
_C_MAKE = getattr(json.encoder, "c_make_encoder", None)
_C_QUOTE = getattr(json.encoder, "c_encode_basestring", None)
_CHECKED_ENCODE: Any = None if _C_MAKE is None or _C_QUOTE is None else _C_MAKE(
    None, _ENCODER.default, _C_QUOTE, None, ":", ",", False, False, False)


def _show(value: object) -> str:
    """Return a short repr of a refused value for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_tree(obj: Any, path: str, depth: int) -> None:
    """Refuse anything JSON cannot carry faithfully, naming where it is."""
    if depth > MAX_DATA_DEPTH:
        raise LimitExceeded(f"{path} is nested deeper than {MAX_DATA_DEPTH} levels")
    if obj is None or isinstance(obj, (str, bool, int)):
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise InvalidArgument(f"{path} must be a finite number, got {obj!r}")
        return
    # Scalar children are accepted inline (no recursion, no path string) unless they would
    # exceed the depth limit: this is the hot path of every put.
    leaf_ok = depth < MAX_DATA_DEPTH
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{path} has a non-string key {_show(key)}")
            if leaf_ok and (value is None or isinstance(value, _SCALARS)
                            or (type(value) is float and math.isfinite(value))):
                continue
            _check_tree(value, f"{path}[{key!r}]", depth + 1)
        return
    if isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            if leaf_ok and (value is None or isinstance(value, _SCALARS)
                            or (type(value) is float and math.isfinite(value))):
                continue
            _check_tree(value, f"{path}[{index}]", depth + 1)
        return
    raise InvalidArgument(
        f"{path} is not JSON-serialisable: {type(obj).__name__} {_show(obj)}"
    )


def dumps(obj: Any, *, path: str = "value") -> str:
    """Encode compact JSON; refuse NaN/inf and non-JSON types naming the path."""
    try:
        return _ENCODER.encode(obj)
    except (TypeError, ValueError, RecursionError):
        _check_tree(obj, path, 0)
        raise InvalidArgument(f"{path} is not JSON-serialisable") from None


def dumps_data(data: Any, *, name: str = "data") -> str:
    """Encode job data: a JSON object of at most 1 MiB, nesting at most 64 levels."""
    if not isinstance(data, dict):
        raise InvalidArgument(f"{name} must be a JSON object (dict), got {type(data).__name__}")
    _check_tree(data, name, 0)
    if _CHECKED_ENCODE is None:
        text = dumps(data, path=name)
    else:
        try:
            text = "".join(_CHECKED_ENCODE(data, 0))
        except (TypeError, ValueError, RecursionError):
            raise InvalidArgument(f"{name} is not JSON-serialisable") from None
    if text.isascii():  # ASCII is valid UTF-8 of one byte per character: skip the encode
        size = len(text)
        if size <= MAX_DATA_BYTES:
            return text
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        reason = exc.reason
        raise InvalidArgument(f"{name} contains text that is not valid UTF-8: {reason}") from None
    if size > MAX_DATA_BYTES:
        raise LimitExceeded(f"{name} is {size:,} bytes, {size - MAX_DATA_BYTES:,} over the "
                            f"limit of {MAX_DATA_BYTES:,} bytes (1 MiB)")
    return text


def loads(text: str | bytes) -> Any:
    """Decode JSON text."""
    return json.loads(text)


def check_name(kind: str, value: object) -> str:
    """Check a queue-style name: 1-64 chars of [A-Za-z0-9_.-]."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{kind} must be a non-empty string, got {_show(value)}")
    if len(value) > 64:
        raise InvalidArgument(f"{kind} must be at most 64 characters, got {_show(value)}")
    if not _NAME.fullmatch(value):
        raise InvalidArgument(f"{kind} may only contain A-Z a-z 0-9 _ . -, got {_show(value)}")
    return value


def check_jid(value: object, *, kind: str = "jid") -> str:
    """Check a jid: a name that cannot collide with another job's keys."""
    jid = check_name(kind, value)
    if jid.endswith(_JID_SUFFIXES):
        raise InvalidArgument(f"{kind} must not end in -history/-dependents/-dependencies: {jid!r}")
    return jid


def check_recurring_jid(value: object) -> str:
    """Check a recurring job's jid (at most 48 chars: children are `<jid>-<n>`)."""
    jid = check_jid(value)
    if len(jid) > 48:
        raise InvalidArgument(f"jid of a recurring job must be at most 48 characters: {jid!r}")
    return jid


def _printable(text: str, *, ascii_only: bool = False) -> bool:
    """Return whether the text has no control characters (and is ASCII if asked)."""
    if ascii_only:
        return text.isascii() and text.isprintable()
    return text.isprintable()


def check_worker(value: object) -> str:
    """Check a worker name: 1-128 printable ASCII chars, no space, no colon."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= 128
        or not _printable(value, ascii_only=True)
        or " " in value
        or ":" in value
    ):
        raise InvalidArgument(
            f"worker must be 1-128 printable ASCII characters without space or ':', "
            f"got {_show(value)}"
        )
    return value


def check_text(name: str, value: object, max_bytes: int) -> str:
    """Check a non-empty printable string of at most `max_bytes` UTF-8 bytes."""
    if not isinstance(value, str) or not value or not value.isprintable():
        raise InvalidArgument(f"{name} must be a non-empty printable string, got {_show(value)}")
    if len(value) > max_bytes // 4 and len(value.encode("utf-8")) > max_bytes:
        raise InvalidArgument(f"{name} must be at most {max_bytes} bytes, got {_show(value)}")
    return value


def check_klass(value: object) -> str:
    """Check a job class name (a class becomes `module.QualName`)."""
    if isinstance(value, type):
        value = f"{value.__module__}.{value.__qualname__}"
    return check_text("klass", value, 256)


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """Parse an integer strictly (no bool, floats only if integral, plain decimal text)."""
    if type(value) is int and (lo is None or value >= lo) and (hi is None or value <= hi):
        return value  # the common case, decided without the checks below
    result: int | None = None
    if isinstance(value, bool):
        result = None
    elif isinstance(value, int):
        result = int(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        result = int(value)
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value):
        result = int(value)
    if result is None:
        raise InvalidArgument(f"{name} must be an integer, got {_show(value)}")
    if (lo is not None and result < lo) or (hi is not None and result > hi):
        if hi is None:
            raise InvalidArgument(f"{name} must be an integer >= {lo}, got {_show(value)}")
        if lo is None:
            raise InvalidArgument(f"{name} must be an integer <= {hi}, got {_show(value)}")
        raise InvalidArgument(f"{name} must be an integer in [{lo}, {hi}], got {_show(value)}")
    return result


def check_number(
    name: str, value: object, lo: float | None = None, hi: float | None = None
) -> float:
    """Parse a finite number strictly (no bool, no hex, no padding, no nan/inf)."""
    result: float | None = None
    if isinstance(value, bool):
        result = None
    elif isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str) and _NUM_TEXT.fullmatch(value):
        result = float(value)
    if result is None:
        raise InvalidArgument(f"{name} must be a number, got {_show(value)}")
    if not math.isfinite(result):
        raise InvalidArgument(f"{name} must be finite, got {_show(value)}")
    if lo is not None and result < lo:
        raise InvalidArgument(f"{name} must be >= {_bound(lo)}, got {_show(value)}")
    if hi is not None and result > hi:
        raise InvalidArgument(f"{name} must be at most {_bound(hi)}, got {_show(value)}")
    return result


def _bound(limit: float) -> str:
    """Write a limit in plain digits (315360000, not 3.1536e+08)."""
    return str(int(limit)) if limit == int(limit) else f"{limit:f}".rstrip("0")


def _as_list(name: str, values: object) -> list[object]:
    """Accept any iterable except a bare string (a classic mistake: tags="x")."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgument(f"{name} must be a list of strings, got {_show(values)}")
    return list(values)


def check_tags(values: object, *, name: str = "tags") -> list[str]:
    """Check tags: at most 50 strings of 1-64 printable chars, de-duplicated in order."""
    items = _as_list(name, values)
    tags = list(dict.fromkeys(check_text(f"{name} item", t, 64) for t in items))
    if len(tags) > MAX_TAGS:
        raise LimitExceeded(f"{name} has {len(tags)} items, at most {MAX_TAGS} allowed")
    return tags


def check_jids(values: object, *, name: str = "jids", limit: int = MAX_LIST) -> list[str]:
    """Check a list of jids (at most `limit`)."""
    items = _as_list(name, values)
    if len(items) > limit:
        raise LimitExceeded(f"{name} has {len(items)} items, at most {limit} allowed")
    return [check_jid(j, kind=f"{name} item") for j in items]


def check_depends(values: object, jid: str | None = None) -> list[str]:
    """Check a dependency list: at most 1000 jids, de-duplicated, not the job itself."""
    deps = list(dict.fromkeys(check_jids(values, name="depends")))
    if jid is not None and jid in deps:
        raise InvalidArgument(f"depends must not contain the job itself: {jid!r}")
    return deps


def check_throttles(values: object) -> list[str]:
    """Check throttle ids: at most 10 printable strings of 1-128 chars."""
    items = _as_list("throttles", values)
    ids = list(dict.fromkeys(check_text("throttles item", t, 128) for t in items))
    if len(ids) > MAX_THROTTLES:
        raise LimitExceeded(f"throttles has {len(ids)} items, at most {MAX_THROTTLES} allowed")
    return ids


def num(value: float) -> str:
    """Format a number the way the engine parses it (repr for floats)."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def as_list(value: Any) -> list[Any]:
    """Normalise the engine's empty-array quirk (`{}`, nil) to a list."""
    if not value:
        return []
    return list(value)


def check_delay(delay: object) -> str:
    """Validate a delay in seconds and encode it."""
    if delay == 0 and type(delay) is int:
        return "0"  # the common case
    return num(check_number("delay", delay, 0, MAX_DELAY))


def put_options(
    *,
    priority: object,
    tags: object,
    retries: object,
    depends: object | None,
    throttles: object | None,
    jid: str,
    depends_missing: str = "error",
) -> list[str]:
    """Validate and encode the name/value options shared by put, requeue and move.

    `depends_missing="error"` refuses a dependency on a jid that does not exist
    (`DependencyError`); "ignore" drops it silently, as qless-core does.
    """
    options = [
        "priority", str(check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX)),
        "tags", "[]" if _empty(tags) else dumps(check_tags(tags)),
        "retries", str(check_int("retries", retries, 0, 1000)),
    ]
    if depends is not None:
        if depends_missing not in ("error", "ignore"):
            raise InvalidArgument(
                f"depends_missing must be 'error' or 'ignore', got {depends_missing!r}"
            )
        if _empty(depends):
            options += ["depends", "[]"]
        else:
            options += ["depends", dumps(check_depends(depends, jid))]
            if depends_missing == "error":
                options += ["depends-missing", "error"]
    if throttles is not None:
        options += ["throttles", "[]" if _empty(throttles) else dumps(check_throttles(throttles))]
    return options


def carry_options(history: list[dict[str, Any]], remaining: int | None = None) -> list[str]:
    """Encode what a copy between shards carries (with `if-absent`): the job's history
    entries and, unless None, its retries left."""
    options = ["history", dumps(history, path="history")]
    if remaining is not None:
        options += ["remaining", str(check_int("remaining", remaining, 0, 1000))]
    return options


def _empty(values: object) -> bool:
    """Return whether values is an empty tuple or list (the defaults: nothing to check)."""
    return (type(values) is tuple or type(values) is list) and not values


def new_jid() -> str:
    """Return a fresh random jid (uuid4 hex)."""
    # Same bits as uuid.uuid4().hex (version 4, RFC 4122 variant) at a third of the cost.
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


def new_jids(n: int) -> list[str]:
    """Return n fresh random jids, as new_jid makes them, from one read of the OS's source."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = bytes(b & 0x0F | 0x40 for b in raw[6::16])
    raw[8::16] = bytes(b & 0x3F | 0x80 for b in raw[8::16])
    text = raw.hex()
    return [text[i:i + 32] for i in range(0, 32 * n, 32)]
