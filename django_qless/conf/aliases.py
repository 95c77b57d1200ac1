"""Alias options: one connection alias of ``QLESS`` (URL, Sentinel, TLS, ACL, or a cluster),
with its environment fallbacks (``QLESS_[<ALIAS>_]URL``, ``..._CLUSTER``, ``..._USERNAME``,
``..._PASSWORD``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django_qless.conf.cluster import parse_cluster
from django_qless.conf.model import (
    ALIAS_KEYS,
    CLUSTER_KEYS,
    DEFAULT_ALIAS,
    DEFAULT_URL,
    AliasSettings,
)
from django_qless.conf.reporter import Reporter

__all__ = ["close_key", "env_location", "parse_alias", "shadowed_environment"]


def close_key(name: object, known: Iterable[str]) -> str | None:
    """Return the known key closest to a misspelt one (``URl`` -> ``URL``), if any is close."""
    import difflib

    if not isinstance(name, str):
        return None
    close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.7)
    return close[0] if close else None


def parse_alias(p: Reporter, name: str, raw: Any) -> AliasSettings | None:
    """Check one alias's keys (environment fallbacks included); return its settings."""
    key = f"QLESS[{name!r}]"
    if not isinstance(raw, Mapping):
        p.error(key, f"{key} must be a dict, not {type(raw).__name__}.",
                f'Use {{"URL": "{DEFAULT_URL}"}}.', 20)
        return None
    for unknown in sorted(set(raw) - ALIAS_KEYS, key=str):
        guess = close_key(unknown, ALIAS_KEYS)
        p.error(f"{key}[{unknown!r}]", f"{key} has an unknown key {unknown!r}"
                + (f"; did you mean {guess!r}?" if guess else "."),
                f"Valid keys: {', '.join(sorted(ALIAS_KEYS))}.", 21)
    prefix = "QLESS_" if name == DEFAULT_ALIAS else f"QLESS_{name.upper()}_"
    url = raw.get("URL")
    sentinels_raw = raw.get("SENTINELS")
    nodes = raw.get("CLUSTER")
    if url is None and not sentinels_raw and nodes is None:
        url, nodes = env_location(p, key, prefix)
        if url is None and nodes is None and name == DEFAULT_ALIAS:
            url = DEFAULT_URL
    else:
        shadowed_environment(p, key, prefix, raw)
    if url is not None and sentinels_raw:
        p.error(key, f"{key} sets both URL and SENTINELS.",
                "Keep one: SENTINELS + MASTER_NAME for Sentinel, URL otherwise.", 22)
    if nodes is not None and (url is not None or sentinels_raw):
        p.error(key, f"{key} sets CLUSTER together with "
                f"{'URL' if url is not None else 'SENTINELS'}.",
                "Keep one: CLUSTER for a Redis Cluster, URL for one server, SENTINELS "
                "for Sentinel.", 100)
    if url is None and not sentinels_raw and nodes is None:
        p.error(f"{key}['URL']", f"{key} has no URL.",
                f'Set "URL" (or "CLUSTER") or the environment variable {prefix}URL '
                f"(or {prefix}CLUSTER).", 23)
    if url is not None:
        p.url(f"{key}['URL']", url, raw)
    cluster = None
    if nodes is not None:
        cluster = parse_cluster(p, key, raw, nodes, raw)
    else:
        for name_ in CLUSTER_KEYS:
            if name_ in raw:
                p.error(f"{key}[{name_!r}]", f"{key} sets {name_} but is not a cluster "
                        "alias (no CLUSTER).",
                        f'Add "CLUSTER": [node URLs] to shard its queues over a Redis '
                        f"Cluster, or remove {name_}.", 112)
    sentinels: list[tuple[str, int]] = []
    if sentinels_raw:
        for item in sentinels_raw:
            if (not isinstance(item, list | tuple) or len(item) != 2
                    or not isinstance(item[0], str) or not isinstance(item[1], int)):
                p.error(f"{key}['SENTINELS']",
                        f"{key}['SENTINELS'] entries must be (host, port), not {item!r}.",
                        'Use "SENTINELS": [("10.0.0.1", 26379), ...].', 24)
                break
            sentinels.append((item[0], item[1]))
        if not isinstance(raw.get("MASTER_NAME"), str):
            p.error(f"{key}['MASTER_NAME']", f"{key} uses SENTINELS without MASTER_NAME.",
                    'Add "MASTER_NAME": "mymaster".', 25)
    options = raw.get("OPTIONS", {})
    if not isinstance(options, Mapping):
        p.error(f"{key}['OPTIONS']", f"{key}['OPTIONS'] must be a dict.",
                'Use "OPTIONS": {"socket_timeout": 10}.', 26)
        options = {}
    cert_reqs = str(raw.get("SSL_CERT_REQS", "required")).lower()
    if cert_reqs not in ("required", "optional", "none"):
        p.error(f"{key}['SSL_CERT_REQS']", f"{key}['SSL_CERT_REQS'] is {cert_reqs!r}.",
                'Use "required" (default), "optional" or "none".', 27)
    elif cert_reqs == "none":
        p.warn(f"{key}['SSL_CERT_REQS']",
               f"{key} does not verify the Redis server's TLS certificate.",
               'Provide "SSL_CA_CERTS" and remove "SSL_CERT_REQS": "none".', 27)
    timeout = p.number(f"{key}['SOCKET_TIMEOUT']", raw.get("SOCKET_TIMEOUT"),
                       integer=False, minimum=0.001)
    username = raw.get("USERNAME", p.envval(f"{prefix}USERNAME"))
    password = raw.get("PASSWORD", p.envval(f"{prefix}PASSWORD"))
    if cluster is not None:
        # The nodes' URLs may carry the credentials; the keys win, as for URL.
        username = cluster.url_username if username is None else username
        password = cluster.url_password if password is None else password
    return AliasSettings(
        alias=name,
        url=url if nodes is None else None,
        username=username,
        password=password,
        sentinels=tuple(sentinels),
        master_name=raw.get("MASTER_NAME"),
        sentinel_kwargs=dict(raw.get("SENTINEL_KWARGS") or {}),
        options=dict(options),
        ssl_cert_reqs=cert_reqs,
        ssl_ca_certs=raw.get("SSL_CA_CERTS"),
        ssl_certfile=raw.get("SSL_CERTFILE"),
        ssl_keyfile=raw.get("SSL_KEYFILE"),
        socket_timeout=timeout,
        eager=p.bool_(f"{key}['EAGER']", raw.get("EAGER")),
        cluster=cluster,
    )


def env_location(p: Reporter, key: str, prefix: str) -> tuple[str | None, list[str] | None]:
    """Read an alias's ``<prefix>URL`` or ``<prefix>CLUSTER`` (a comma list of node
    URLs) from the environment; both set is an error."""
    url = p.envval(f"{prefix}URL")
    nodes = p.envval(f"{prefix}CLUSTER", "list")
    if url is not None and nodes is not None:
        p.error(key, f"The environment sets both {prefix}URL and {prefix}CLUSTER for "
                f"{key}.", f"Unset one: {prefix}CLUSTER for a Redis Cluster, "
                f"{prefix}URL for one server.", 113)
        return url, None
    return url, nodes



def shadowed_environment(p: Reporter, key: str, prefix: str, raw: Mapping[str, Any]) -> None:
    """Warn when ``<prefix>URL``/``<prefix>CLUSTER`` is set but the alias's own location
    wins (a deploy that sets only the variable would silently keep the settings' server)."""
    given = "URL" if raw.get("URL") is not None else (
        "CLUSTER" if raw.get("CLUSTER") is not None else "SENTINELS")
    for name in (f"{prefix}URL", f"{prefix}CLUSTER"):
        value = p.envval(name)
        if value is None:
            continue
        if given == "URL" and name.endswith("URL") and value == raw.get("URL"):
            continue  # settings read the variable themselves: URL = env("QLESS_URL")
        if given == "CLUSTER" and name.endswith("CLUSTER") and [
                v.strip() for v in value.split(",") if v.strip()] == list(raw.get("CLUSTER") or []):
            continue
        p.warn(name, f"The environment variable {name} is set, but {key} sets {given}: "
               f"the variable is ignored.",
               f"Remove {given} from {key} to use the environment (or read the variable "
               f"there yourself), or unset {name}.", 116)
