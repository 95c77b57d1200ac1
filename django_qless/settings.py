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
see ``settings_cluster``.

Environment (django-environ; a value in settings always wins): ``QLESS_URL`` (default alias),
``QLESS_<ALIAS>_URL``, ``QLESS_[<ALIAS>_]CLUSTER`` (comma list of node URLs),
``QLESS_<ALIAS>_PASSWORD``, ``QLESS_COMMIT_MODE``, ``QLESS_EAGER``,
``QLESS_WORKER_QUEUES`` (comma list), ``QLESS_WORKER_PROCESSES``, ``QLESS_WORKER_RESERVER``,
``QLESS_WORKER_INTERVAL``, ``QLESS_WORKER_TIMEOUT``, ``QLESS_WORKER_HEARTBEAT``,
``QLESS_WORKER_PREFETCH``, ``QLESS_WORKER_START_TIMEOUT``.
Without any setting or variable the default alias is ``redis://localhost:6379/0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_qless.settings_cluster import CLUSTER_KEYS, ClusterSettings

__all__ = [
    "AliasSettings",
    "Problem",
    "QlessSettings",
    "ReceiverSettings",
    "WorkerSettings",
    "clear_cache",
    "get_problems",
    "get_settings",
    "mask_url",
    "parse",
]

DEFAULT_ALIAS = "default"
DEFAULT_URL = "redis://localhost:6379/0"
COMMIT_MODES = ("on_commit", "immediate")
GLOBAL_KEYS = frozenset(
    {"QUEUES", "WORKER", "COMMIT_MODE", "JOB_MODULES", "AUTODISCOVER", "EAGER",
     "RECEIVERS", "SCHEDULE"}
)
ALIAS_KEYS = frozenset(
    {"URL", "USERNAME", "PASSWORD", "SENTINELS", "MASTER_NAME", "SENTINEL_KWARGS", "OPTIONS",
     "SSL_CERT_REQS", "SSL_CA_CERTS", "SSL_CERTFILE", "SSL_KEYFILE", "SOCKET_TIMEOUT", "EAGER",
     "CLUSTER", *CLUSTER_KEYS}
)
RECEIVER_KEYS = frozenset(
    {"MAIL_ADMINS_ON_FAILURE", "WEBHOOK_URL", "WEBHOOK_EVENTS", "WEBHOOK_TIMEOUT"}
)
SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class Problem:
    """One invalid setting: where it is, what is wrong, how to fix it."""

    key: str
    message: str
    hint: str
    id: str = "django_qless.E001"
    warning: bool = False


@dataclass(frozen=True)
class AliasSettings:
    """Connection settings of one alias (credentials masked in repr)."""

    alias: str
    url: str | None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str | None = None
    sentinel_kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False)
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    ssl_cert_reqs: str = "required"
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    socket_timeout: float | None = None
    eager: bool | None = None
    #: Set for an alias whose queues are sharded over a Redis Cluster (``CLUSTER``).
    cluster: ClusterSettings | None = None

    @property
    def scheme(self) -> str:
        """Return ``sentinel``, or the scheme of the URL or of the cluster's nodes."""
        if self.cluster is not None:
            return self.cluster.scheme
        return "sentinel" if self.sentinels else urlsplit(self.url or "").scheme

    @property
    def display(self) -> str:
        """Return a credential-free description of where this alias points."""
        if self.cluster is not None:
            hosts = ",".join(f"{h}:{p}" for h, p in self.cluster.addresses)
            return f"{self.cluster.scheme}://{hosts} (cluster, {self.cluster.shards} shards)"
        if self.sentinels:
            hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"sentinel://{hosts}/{self.master_name}"
        return mask_url(self.url or "")


@dataclass(frozen=True)
class WorkerSettings:
    """Defaults for ``manage.py qless_worker``."""

    queues: tuple[str, ...] = ("default",)
    processes: int | None = None
    reserver: str = "ordered"
    interval: float = 5.0
    timeout: float | None = None
    max_jobs: int | None = None
    heartbeat: int | None = None
    prefetch: bool = True
    start_timeout: float = 30.0
    # Every QLESS["WORKER"] value given, by option name (None: not set).
    values: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ReceiverSettings:
    """Switches for the optional receivers in ``django_qless.receivers``."""

    mail_admins_on_failure: bool = False
    webhook_url: str | None = None
    webhook_events: tuple[str, ...] = ("completed", "failed")
    webhook_timeout: float = 5.0


@dataclass(frozen=True)
class QlessSettings:
    """The whole parsed ``QLESS`` setting."""

    aliases: Mapping[str, AliasSettings]
    queues: Mapping[str, str] = field(default_factory=dict)
    worker: WorkerSettings = WorkerSettings()
    commit_mode: str = "on_commit"
    job_modules: tuple[str, ...] = ()
    autodiscover: bool = True
    eager: bool = False
    receivers: ReceiverSettings = ReceiverSettings()

    def alias_for_queue(self, queue: str) -> str:
        """Return the alias a queue is routed to."""
        return self.queues.get(queue, DEFAULT_ALIAS)

    def is_eager(self, alias: str) -> bool:
        """Return whether jobs for this alias run inline."""
        conf = self.aliases.get(alias)
        if conf is not None and conf.eager is not None:
            return conf.eager
        return self.eager


def mask_url(url: str) -> str:
    """Return the URL with any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def parse(raw: Any, env: Any = None) -> tuple[QlessSettings, list[Problem]]:
    """Parse a raw ``QLESS`` value; return the settings and every problem found."""
    from django_qless.settings_parser import parse_settings

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
