"""Read ``settings.QLESS`` (plus environment fallbacks) into frozen dataclasses.

Shape, like ``CACHES``: every lowercase key is a connection alias, the UPPERCASE keys are
global options::

    QLESS = {
        "default": {"URL": "redis://localhost:6379/0", "OPTIONS": {"socket_timeout": 10}},
        "reports": {"SENTINELS": [("10.0.0.1", 26379)], "MASTER_NAME": "mymaster",
                    "USERNAME": "qless", "PASSWORD": "..."},
        "QUEUES": {"reports": "reports"},          # queue name -> alias (default: "default")
        "WORKER": {"QUEUES": ["default"], "PROCESSES": 2, "RESERVER": "ordered",
                   "INTERVAL": 60.0, "TIMEOUT": None, "MAX_JOBS": None,
                   "HEARTBEAT": None,              # seconds: set in qless config at start
                   "PREFETCH": True,               # hold one job ahead while short jobs run
                   "START_TIMEOUT": 30.0},         # seconds to wait for Redis at start
        "COMMIT_MODE": "on_commit",                # or "immediate"
        "JOB_MODULES": ["myapp.legacy_jobs"],      # classes under these modules may run
        "AUTODISCOVER": True,                      # import <app>.jobs for every installed app
        "EAGER": False,                            # run jobs inline (per alias too)
        "RECEIVERS": {"MAIL_ADMINS_ON_FAILURE": False, "WEBHOOK_URL": None,
                      "WEBHOOK_EVENTS": ["completed", "failed"], "WEBHOOK_TIMEOUT": 5.0},
    }

Alias keys: ``URL`` (``redis://``, ``rediss://`` (TLS), ``unix://``), ``USERNAME``/``PASSWORD``
(ACL; override the URL's), ``SENTINELS`` + ``MASTER_NAME`` (+ ``SENTINEL_KWARGS``), ``OPTIONS``
(extra redis-py keyword arguments), ``SSL_CERT_REQS`` (``"required"`` by default; ``"none"``
must be set explicitly to skip certificate checks), ``SSL_CA_CERTS``, ``SSL_CERTFILE``,
``SSL_KEYFILE``, ``SOCKET_TIMEOUT`` and ``EAGER``. A cluster alias sets ``CLUSTER`` (node
URLs of a Redis Cluster, instead of ``URL``/``SENTINELS``) and may set ``SHARDS`` (16),
``PLACEMENT`` (queue -> shard), ``DURABLE_REPLICAS`` (0) and ``DURABLE_TIMEOUT`` (1.0 s);
see ``conf.cluster``.

Environment (django-environ; a value in settings always wins): ``QLESS_URL`` (default alias),
``QLESS_<ALIAS>_URL``, ``QLESS_[<ALIAS>_]CLUSTER`` (comma list of node URLs),
``QLESS_<ALIAS>_PASSWORD``, ``QLESS_COMMIT_MODE``, ``QLESS_EAGER``,
``QLESS_WORKER_QUEUES`` (comma list), ``QLESS_WORKER_PROCESSES``, ``QLESS_WORKER_RESERVER``,
``QLESS_WORKER_INTERVAL``, ``QLESS_WORKER_TIMEOUT``, ``QLESS_WORKER_HEARTBEAT``,
``QLESS_WORKER_PREFETCH``, ``QLESS_WORKER_START_TIMEOUT``, ``QLESS_WORKER_TERM_GRACE``,
``QLESS_WORKER_HEALTH_FILE``.
Without any setting or variable the default alias is ``redis://localhost:6379/0``.

The package's modules import one way: ``model`` (the dataclasses) <- ``reporter`` (raw
values, problems) <- ``cluster`` (cluster keys) <- ``aliases`` (one alias) <- ``parser``
(the whole setting) <- this module (Django's settings, the cache).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_qless.conf.model import (
    DEFAULT_ALIAS,
    DEFAULT_URL,
    AliasSettings,
    ClusterSettings,
    Problem,
    QlessSettings,
    ReceiverSettings,
    WorkerSettings,
    mask_url,
)
from django_qless.conf.parser import parse_settings

__all__ = [
    "DEFAULT_ALIAS", "DEFAULT_URL", "AliasSettings", "ClusterSettings", "Problem",
    "QlessSettings", "ReceiverSettings", "WorkerSettings", "clear_cache", "get_problems",
    "get_settings", "mask_url", "parse",
]


def parse(raw: Any, env: Any = None) -> tuple[QlessSettings, list[Problem]]:
    """Parse a raw ``QLESS`` value; return the settings and every problem found."""
    return parse_settings(raw, env)


@cache
def _parsed() -> tuple[QlessSettings, tuple[Problem, ...]]:
    result, problems = parse(getattr(settings, "QLESS", None))
    return result, tuple(problems)


def get_settings() -> QlessSettings:
    """Return the parsed settings; raise ImproperlyConfigured naming the first bad key."""
    result, problems = _parsed()
    errors = [p for p in problems if not p.warning]
    if errors:
        first = errors[0]
        raise ImproperlyConfigured(f"{first.message} {first.hint}")
    return result


def get_problems() -> tuple[Problem, ...]:
    """Return every problem in the current settings (used by the system checks)."""
    return _parsed()[1]


def clear_cache(**kwargs: Any) -> None:
    """Forget the parsed settings (connected to ``setting_changed``)."""
    if kwargs.get("setting", "QLESS") == "QLESS":
        _parsed.cache_clear()
