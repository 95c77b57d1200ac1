"""The parsed ``QLESS`` setting as frozen dataclasses, and the names every parser step shares.

This module imports nothing else from ``django_qless.conf``: the parsing steps import it, in
one direction (``model`` -> ``reporter`` -> ``cluster`` -> ``aliases`` -> ``parser``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "ALIAS_KEYS",
    "CLUSTER_KEYS",
    "COMMIT_MODES",
    "DEFAULT_ALIAS",
    "DEFAULT_DURABLE_TIMEOUT",
    "DEFAULT_SHARDS",
    "DEFAULT_URL",
    "GLOBAL_KEYS",
    "RECEIVER_KEYS",
    "SCHEMES",
    "AliasSettings",
    "ClusterSettings",
    "Problem",
    "QlessSettings",
    "ReceiverSettings",
    "WorkerSettings",
    "mask_url",
]

DEFAULT_ALIAS = "default"
DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_SHARDS = 16
DEFAULT_DURABLE_TIMEOUT = 1.0
COMMIT_MODES = ("on_commit", "immediate")
#: The keys that only mean something on a cluster alias (CLUSTER itself aside).
CLUSTER_KEYS = ("SHARDS", "PLACEMENT", "DURABLE_REPLICAS", "DURABLE_TIMEOUT")
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


def mask_url(url: str) -> str:
    """Return the URL with any password (in its user part or a ``password=`` query
    parameter, as redis-py reads them) replaced by ``***``."""
    base, mark, query = url.partition("?")
    parts = urlsplit(base)
    if parts.password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        base = parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()
    return base + mark + _QUERY_PASSWORD.sub(r"\1***", query)


_QUERY_PASSWORD = re.compile(r"(?i)((?:^|&)password=)[^&]*")


@dataclass(frozen=True)
class Problem:
    """One invalid setting: where it is, what is wrong, how to fix it."""

    key: str
    message: str
    hint: str
    id: str = "django_qless.E001"
    warning: bool = False


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster part of an alias: node URLs, shard count, placement, durability."""

    nodes: tuple[str, ...] = field(repr=False)  # the URLs may carry a password
    scheme: str = "redis"
    shards: int = DEFAULT_SHARDS
    placement: Mapping[str, int | str] = field(default_factory=dict)
    durable_replicas: int = 0
    durable_timeout: float = DEFAULT_DURABLE_TIMEOUT
    # Credentials written in the node URLs (the same in every URL that has any).
    url_username: str | None = field(default=None, repr=False)
    url_password: str | None = field(default=None, repr=False)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Return each node's (host, port)."""
        out = []
        for url in self.nodes:
            parts = urlsplit(url)
            out.append((parts.hostname or "", parts.port or 6379))
        return out

    @property
    def durable_timeout_ms(self) -> int:
        """Return DURABLE_TIMEOUT in whole milliseconds (at least 1)."""
        return max(1, round(self.durable_timeout * 1000))


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
            n = self.cluster.shards
            return f"{self.cluster.scheme}://{hosts} (cluster, {n} shard{'s' * (n != 1)})"
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
