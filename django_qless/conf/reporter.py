"""Raw parsing: collect problems while reading values from ``QLESS`` and the environment.

Each problem names the key, says what is wrong and how to fix it; the system checks report
them and ``conf.get_settings()`` raises on the first error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from django_qless.conf.model import SCHEMES, Problem

__all__ = ["ALIAS_RE", "QUEUE_RE", "Reporter"]

ALIAS_RE = re.compile(r"^[a-z0-9_][a-z0-9_-]{0,63}$")
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Reporter:
    """Collect problems while checking raw values; read environment variables."""

    def __init__(self, env: environ.Env) -> None:
        self.env = env
        self.problems: list[Problem] = []

    def error(self, key: str, message: str, hint: str, code: int = 1) -> None:
        """Record an error (``django_qless.E<code>``)."""
        self.problems.append(Problem(key, message, hint, f"django_qless.E{code:03d}"))

    def warn(self, key: str, message: str, hint: str, code: int = 1) -> None:
        """Record a warning (``django_qless.W<code>``)."""
        self.problems.append(Problem(key, message, hint, f"django_qless.W{code:03d}", True))

    def envval(self, name: str, kind: str = "str") -> Any:
        """Read an environment variable with django-environ's `kind` reader (None: unset)."""
        try:
            return getattr(self.env, kind)(name, default=None)
        except (ValueError, ImproperlyConfigured) as exc:
            self.error(name, f"environment variable {name} is invalid: {exc}",
                       f"Fix or unset {name}.", 2)
            return None

    def bool_(self, key: str, value: Any) -> bool | None:
        """Check a flag (None: not set, or refused)."""
        if value is None or isinstance(value, bool):
            return value
        self.error(key, f"{key} must be True or False, not {value!r}.", f"Set {key} = True.", 3)
        return None

    def number(self, key: str, value: Any, *, integer: bool, minimum: float) -> Any:
        """Check a number at least `minimum` (None: not set, or refused)."""
        if value is None:
            return None
        ok = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok or value < minimum:
            kind = "an integer" if integer else "a number"
            self.error(key, f"{key} must be {kind} >= {minimum:g}, not {value!r}.",
                       f"Set {key} to {kind} such as {max(int(minimum), 1)}.", 4)
            return None
        return value

    def queue_list(self, key: str, value: Any) -> tuple[str, ...] | None:
        """Check a non-empty list of queue names (None: refused)."""
        if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
            self.error(key, f"{key} must be a non-empty list of queue names, not {value!r}.",
                       f'Set {key} = ["default"].', 5)
            return None
        bad = [q for q in value if not isinstance(q, str) or not QUEUE_RE.match(q)]
        if bad:
            self.error(key, f"{key} has invalid queue names: {bad!r}.",
                       "Queue names are 1-64 characters of letters, digits, '_', '.', '-'.", 5)
            return None
        return tuple(value)

    def url(self, key: str, url: Any, conf: Mapping[str, Any]) -> None:
        """Check one server URL (redis://, rediss:// or unix://)."""
        if not isinstance(url, str):
            self.error(key, f"{key} must be a string URL, not {type(url).__name__}.",
                       'Use "redis://host:6379/0", "rediss://..." or "unix:///path.sock".', 10)
            return
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            self.error(key, f"{key} has unsupported scheme {parts.scheme!r}.",
                       'Use "redis://", "rediss://" (TLS) or "unix://"; for Sentinel set '
                       "SENTINELS and MASTER_NAME instead of URL.", 11)
            return
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            self.error(key, f"{key} has an invalid port.", "Use host:port with 1-65535.", 12)
            return
        if parts.scheme == "unix":
            if not parts.path:
                self.error(key, f"{key} has no socket path.", 'Use "unix:///run/redis.sock".', 13)
            db = parse_qs(parts.query).get("db", ["0"])[0]
        else:
            if not parts.hostname:
                self.error(key, f"{key} has no host.", 'Use "redis://host:6379/0".', 13)
            db = parts.path.lstrip("/") or "0"
        if not db.isdigit():
            self.error(key, f"{key} has an invalid database number {db!r}.",
                       "The database is a non-negative integer, e.g. redis://host:6379/0.", 14)
        query = parse_qs(parts.query)
        insecure = query.get("ssl_cert_reqs", [""])[0].lower() in ("none", "cert_none")
        if insecure and str(conf.get("SSL_CERT_REQS", "")).lower() != "none":
            self.error(key, f"{key} disables TLS certificate verification (ssl_cert_reqs=none).",
                       'Remove it, or allow it explicitly with "SSL_CERT_REQS": "none".', 15)
