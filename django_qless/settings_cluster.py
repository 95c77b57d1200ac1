"""Parse the cluster keys of a ``QLESS`` alias: ``CLUSTER``, ``SHARDS``, ``PLACEMENT``,
``DURABLE_REPLICAS`` and ``DURABLE_TIMEOUT`` (queues sharded over a Redis Cluster).

Every mistake becomes a Problem naming the key (E100-E113, W114, W115, and E015 for a node
URL that turns off certificate checks); nothing here opens a connection.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from django_qless.core.cluster.placement import MAX_SHARDS, shard_tag

if TYPE_CHECKING:
    from django_qless.settings import AliasSettings

__all__ = ["CLUSTER_KEYS", "DEFAULT_SHARDS", "ClusterSettings", "parse_cluster", "placed_elsewhere"]

DEFAULT_SHARDS = 16
DEFAULT_DURABLE_TIMEOUT = 1.0
#: The keys that only mean something on a cluster alias (CLUSTER itself aside).
CLUSTER_KEYS = ("SHARDS", "PLACEMENT", "DURABLE_REPLICAS", "DURABLE_TIMEOUT")
_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SHARD_NAME = re.compile(r"^s(\d{1,4})(?:-\d+)?$")
_EXAMPLE = '"CLUSTER": ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]'


class _Reporter(Protocol):
    """What the settings parser offers this module: a place to put problems."""

    def error(self, key: str, message: str, hint: str, code: int = 1) -> None: ...

    def warn(self, key: str, message: str, hint: str, code: int = 1) -> None: ...


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


def parse_cluster(p: _Reporter, key: str, raw: Mapping[str, Any], nodes: Any,
                  conf: Mapping[str, Any]) -> ClusterSettings | None:
    """Check a cluster alias's keys (`nodes` from CLUSTER or the environment); return its
    settings, or None when the node list is unusable."""
    checked = _nodes(p, f"{key}['CLUSTER']", nodes, conf)
    shards = _shards(p, f"{key}['SHARDS']", raw.get("SHARDS", DEFAULT_SHARDS))
    placement = _placement(p, f"{key}['PLACEMENT']", raw.get("PLACEMENT", {}),
                           shards or DEFAULT_SHARDS)
    replicas = raw.get("DURABLE_REPLICAS", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        p.error(f"{key}['DURABLE_REPLICAS']",
                f"{key}['DURABLE_REPLICAS'] must be an integer >= 0, not {replicas!r}.",
                "Set it to the number of replicas that must confirm each write (0: do not "
                "wait, 1: one replica per shard).", 110)
        replicas = 0
    timeout = raw.get("DURABLE_TIMEOUT", DEFAULT_DURABLE_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        p.error(f"{key}['DURABLE_TIMEOUT']",
                f"{key}['DURABLE_TIMEOUT'] must be a number of seconds > 0, not {timeout!r}.",
                'Set "DURABLE_TIMEOUT": 1.0 (how long a write waits for its replicas).', 111)
        timeout = DEFAULT_DURABLE_TIMEOUT
    elif "DURABLE_TIMEOUT" in raw and not replicas:
        p.warn(f"{key}['DURABLE_TIMEOUT']",
               f"{key} sets DURABLE_TIMEOUT without DURABLE_REPLICAS: writes do not wait for "
               "replicas, so the timeout has no effect.",
               'Add "DURABLE_REPLICAS": 1, or remove DURABLE_TIMEOUT.', 114)
    if checked is None:
        return None
    urls, scheme, username, password = checked
    return ClusterSettings(nodes=urls, scheme=scheme, shards=shards or DEFAULT_SHARDS,
                           placement=placement, durable_replicas=replicas,
                           durable_timeout=float(timeout), url_username=username,
                           url_password=password)


def _nodes(p: _Reporter, key: str, nodes: Any, conf: Mapping[str, Any]
           ) -> tuple[tuple[str, ...], str, str | None, str | None] | None:
    """Check the node URLs; return them with their common scheme and credentials."""
    if isinstance(nodes, str) or not isinstance(nodes, list | tuple) or not nodes:
        p.error(key, f"{key} must be a non-empty list of node URLs, not {nodes!r}.",
                f"Use {_EXAMPLE} (any reachable nodes: the others are discovered).", 101)
        return None
    schemes: set[str] = set()
    users: set[str | None] = set()
    passwords: set[str | None] = set()
    ok = True
    for url in nodes:
        found = _node(p, key, url, conf)
        if found is None:
            ok = False
            continue
        schemes.add(found[0])
        if found[1] is not None or found[2] is not None:
            users.add(found[1])
            passwords.add(found[2])
    if len(schemes) > 1:
        p.error(key, f"{key} mixes the schemes {', '.join(sorted(schemes))}.",
                "Every node of a cluster is reached the same way: use rediss:// (TLS) for "
                "all of them, or redis:// for all.", 105)
        ok = False
    if len(users) > 1 or len(passwords) > 1:
        p.error(key, f"{key} has node URLs with different credentials.",
                'One user applies to every node: write it once, in "USERNAME" and '
                '"PASSWORD" (or identically in every URL).', 106)
        ok = False
    if not ok:
        return None
    username = next(iter(users)) if users else None
    password = next(iter(passwords)) if passwords else None
    return tuple(nodes), schemes.pop(), username, password


def _node(p: _Reporter, key: str, url: Any, conf: Mapping[str, Any]
          ) -> tuple[str, str | None, str | None] | None:
    """Check one node URL; return its scheme and credentials, or None (reported)."""
    if not isinstance(url, str):
        p.error(key, f"{key} entries must be URL strings, not {url!r}.",
                f"Use {_EXAMPLE}.", 101)
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        why = ("cluster nodes are reached over TCP, not unix sockets"
               if parts.scheme == "unix" else f"the scheme {parts.scheme!r} is not supported")
        p.error(key, f"{key} has the node {url!r}: {why}.",
                'Use "redis://host:port" or "rediss://host:port" (TLS) for every node.', 102)
        return None
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1:
        p.error(key, f"{key} has the node {_masked(url)!r} without a valid host:port.",
                'Write each node as "redis://host:port" (port 1-65535, default 6379).', 103)
        return None
    db = parts.path.strip("/") or "0"
    query = parse_qs(parts.query)
    if db != "0" or query.get("db", ["0"]) != ["0"]:
        p.error(key, f"{key} has the node {_masked(url)!r} with database {db!r}.",
                "A Redis Cluster has only database 0: remove the /<db> from the URL.", 104)
        return None
    insecure = query.get("ssl_cert_reqs", [""])[0].lower() in ("none", "cert_none")
    if insecure and str(conf.get("SSL_CERT_REQS", "")).lower() != "none":
        p.error(key, f"{key} disables TLS certificate verification (ssl_cert_reqs=none).",
                'Remove it, or allow it explicitly with "SSL_CERT_REQS": "none".', 15)
        return None
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return parts.scheme, user, password


def _masked(url: str) -> str:
    """Return a node URL with its password hidden (problems are printed and logged)."""
    from django_qless.settings import mask_url

    return mask_url(url)


def _shards(p: _Reporter, key: str, value: Any) -> int | None:
    """Check SHARDS: an integer in 1..MAX_SHARDS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARDS:
        p.error(key, f"{key} must be an integer from 1 to {MAX_SHARDS}, not {value!r}.",
                f"Set {key} = {DEFAULT_SHARDS} (a power of two, at least four per primary; "
                "never lower it once queues are placed).", 107)
        return None
    return value


def _placement(p: _Reporter, key: str, value: Any, shards: int) -> dict[str, int | str]:
    """Check PLACEMENT: queue name -> shard index, name `s<i>` or tag, within SHARDS."""
    if not isinstance(value, Mapping):
        p.error(key, f"{key} must map queue names to shards, not {type(value).__name__}.",
                'Use "PLACEMENT": {"reports": 3, "emails": "s1"}.', 108)
        return {}
    out: dict[str, int | str] = {}
    for queue, shard in value.items():
        if not isinstance(queue, str) or not _QUEUE_RE.match(queue):
            p.error(key, f"{key} has an invalid queue name {queue!r}.",
                    "Queue names are 1-64 characters of letters, digits, '_', '.', '-'.", 108)
            continue
        problem = _shard_problem(shard, shards)
        if problem:
            p.error(f"{key}[{queue!r}]", f"{key}[{queue!r}] is {shard!r}: {problem}.",
                    f"Use a shard index 0-{shards - 1}, a name like \"s1\", or a tag like "
                    f"{shard_tag(min(1, shards - 1))!r}.", 109)
            continue
        out[queue] = shard
    return out


def _shard_problem(shard: Any, shards: int) -> str | None:
    """Say what is wrong with a shard reference (None: it names one of the first shards)."""
    if isinstance(shard, bool) or not isinstance(shard, int | str):
        return "not a shard index or name"
    if isinstance(shard, int):
        return None if 0 <= shard < shards else f"SHARDS is {shards}, so indexes are 0-{shards - 1}"
    match = _SHARD_NAME.match(shard)
    if match is None:
        return "not a shard name (s<i>) or tag (s<i>-<n>)"
    index = int(match.group(1))
    if index >= shards:
        return f"SHARDS is {shards}, so there is no shard s{index}"
    if shard != f"s{index}" and shard != shard_tag(index):
        return f"unknown tag (shard s{index}'s tag is {shard_tag(index)!r})"
    return None


def placed_elsewhere(p: _Reporter, aliases: Mapping[str, AliasSettings],
                     routes: Mapping[str, Any]) -> None:
    """Warn about a queue pinned in one alias's PLACEMENT but routed to another alias."""
    for name, alias in aliases.items():
        for queue in alias.cluster.placement if alias.cluster is not None else ():
            target = routes.get(queue, "default")
            if target != name:
                p.warn(f"QLESS[{name!r}]['PLACEMENT'][{queue!r}]",
                       f"QLESS[{name!r}]['PLACEMENT'] pins queue {queue!r}, but its jobs go "
                       f"to alias {target!r}: the pin has no effect.",
                       f'Route the queue with "QUEUES": {{"{queue}": "{name}"}}, or remove '
                       "the pin.", 115)
