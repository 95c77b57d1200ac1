"""Turn a raw ``QLESS`` value into ``settings`` dataclasses, collecting every problem.

Each problem names the key, says what is wrong and how to fix it; the system checks report
them and ``settings.get_settings()`` raises on the first error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from django_qless.core.workers import option_specs
from django_qless.core.workers.option_specs import OptionSpec, setting_keys
from django_qless.settings import (
    ALIAS_KEYS,
    COMMIT_MODES,
    DEFAULT_ALIAS,
    DEFAULT_URL,
    GLOBAL_KEYS,
    RECEIVER_KEYS,
    SCHEMES,
    AliasSettings,
    Problem,
    QlessSettings,
    ReceiverSettings,
    WorkerSettings,
)
from django_qless.settings_cluster import CLUSTER_KEYS, parse_cluster, placed_elsewhere

__all__ = ["parse_settings"]

_ALIAS_RE = re.compile(r"^[a-z0-9_][a-z0-9_-]{0,63}$")
_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# How an option's environment variable is read (django-environ's readers), by option kind.
_ENV_KINDS = {"int": "int", "number": "float", "flag": "bool", "no_flag": "bool",
              "queues": "list"}


class _Parser:
    """Collect problems while turning raw settings into dataclasses."""

    def __init__(self, env: environ.Env) -> None:
        self.env = env
        self.problems: list[Problem] = []

    def error(self, key: str, message: str, hint: str, code: int = 1) -> None:
        self.problems.append(Problem(key, message, hint, f"django_qless.E{code:03d}"))

    def warn(self, key: str, message: str, hint: str, code: int = 1) -> None:
        self.problems.append(Problem(key, message, hint, f"django_qless.W{code:03d}", True))

    def envval(self, name: str, kind: str = "str") -> Any:
        try:
            return getattr(self.env, kind)(name, default=None)
        except (ValueError, ImproperlyConfigured) as exc:
            self.error(name, f"environment variable {name} is invalid: {exc}",
                       f"Fix or unset {name}.", 2)
            return None

    def bool_(self, key: str, value: Any) -> bool | None:
        if value is None or isinstance(value, bool):
            return value
        self.error(key, f"{key} must be True or False, not {value!r}.", f"Set {key} = True.", 3)
        return None

    def number(self, key: str, value: Any, *, integer: bool, minimum: float) -> Any:
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
        if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
            self.error(key, f"{key} must be a non-empty list of queue names, not {value!r}.",
                       f'Set {key} = ["default"].', 5)
            return None
        bad = [q for q in value if not isinstance(q, str) or not _QUEUE_RE.match(q)]
        if bad:
            self.error(key, f"{key} has invalid queue names: {bad!r}.",
                       "Queue names are 1-64 characters of letters, digits, '_', '.', '-'.", 5)
            return None
        return tuple(value)

    def url(self, key: str, url: Any, conf: Mapping[str, Any]) -> None:
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

    def alias(self, name: str, raw: Any) -> AliasSettings | None:
        key = f"QLESS[{name!r}]"
        if not isinstance(raw, Mapping):
            self.error(key, f"{key} must be a dict, not {type(raw).__name__}.",
                       f'Use {{"URL": "{DEFAULT_URL}"}}.', 20)
            return None
        for unknown in sorted(set(raw) - ALIAS_KEYS):
            self.error(f"{key}[{unknown!r}]", f"{key} has an unknown key {unknown!r}.",
                       f"Valid keys: {', '.join(sorted(ALIAS_KEYS))}.", 21)
        prefix = "QLESS_" if name == DEFAULT_ALIAS else f"QLESS_{name.upper()}_"
        url = raw.get("URL")
        sentinels_raw = raw.get("SENTINELS")
        nodes = raw.get("CLUSTER")
        if url is None and not sentinels_raw and nodes is None:
            url, nodes = self.env_location(key, prefix)
            if url is None and nodes is None and name == DEFAULT_ALIAS:
                url = DEFAULT_URL
        if url is not None and sentinels_raw:
            self.error(key, f"{key} sets both URL and SENTINELS.",
                       "Keep one: SENTINELS + MASTER_NAME for Sentinel, URL otherwise.", 22)
        if nodes is not None and (url is not None or sentinels_raw):
            self.error(key, f"{key} sets CLUSTER together with "
                       f"{'URL' if url is not None else 'SENTINELS'}.",
                       "Keep one: CLUSTER for a Redis Cluster, URL for one server, SENTINELS "
                       "for Sentinel.", 100)
        if url is None and not sentinels_raw and nodes is None:
            self.error(f"{key}['URL']", f"{key} has no URL.",
                       f'Set "URL" (or "CLUSTER") or the environment variable {prefix}URL '
                       f"(or {prefix}CLUSTER).", 23)
        if url is not None:
            self.url(f"{key}['URL']", url, raw)
        cluster = None
        if nodes is not None:
            cluster = parse_cluster(self, key, raw, nodes, raw)
        else:
            for name_ in CLUSTER_KEYS:
                if name_ in raw:
                    self.error(f"{key}[{name_!r}]", f"{key} sets {name_} but is not a cluster "
                               "alias (no CLUSTER).",
                               f'Add "CLUSTER": [node URLs] to shard its queues over a Redis '
                               f"Cluster, or remove {name_}.", 112)
        sentinels: list[tuple[str, int]] = []
        if sentinels_raw:
            for item in sentinels_raw:
                if (not isinstance(item, list | tuple) or len(item) != 2
                        or not isinstance(item[0], str) or not isinstance(item[1], int)):
                    self.error(f"{key}['SENTINELS']",
                               f"{key}['SENTINELS'] entries must be (host, port), not {item!r}.",
                               'Use "SENTINELS": [("10.0.0.1", 26379), ...].', 24)
                    break
                sentinels.append((item[0], item[1]))
            if not isinstance(raw.get("MASTER_NAME"), str):
                self.error(f"{key}['MASTER_NAME']", f"{key} uses SENTINELS without MASTER_NAME.",
                           'Add "MASTER_NAME": "mymaster".', 25)
        options = raw.get("OPTIONS", {})
        if not isinstance(options, Mapping):
            self.error(f"{key}['OPTIONS']", f"{key}['OPTIONS'] must be a dict.",
                       'Use "OPTIONS": {"socket_timeout": 10}.', 26)
            options = {}
        cert_reqs = str(raw.get("SSL_CERT_REQS", "required")).lower()
        if cert_reqs not in ("required", "optional", "none"):
            self.error(f"{key}['SSL_CERT_REQS']", f"{key}['SSL_CERT_REQS'] is {cert_reqs!r}.",
                       'Use "required" (default), "optional" or "none".', 27)
        elif cert_reqs == "none":
            self.warn(f"{key}['SSL_CERT_REQS']",
                      f"{key} does not verify the Redis server's TLS certificate.",
                      'Provide "SSL_CA_CERTS" and remove "SSL_CERT_REQS": "none".', 27)
        timeout = self.number(f"{key}['SOCKET_TIMEOUT']", raw.get("SOCKET_TIMEOUT"),
                              integer=False, minimum=0.001)
        username = raw.get("USERNAME", self.envval(f"{prefix}USERNAME"))
        password = raw.get("PASSWORD", self.envval(f"{prefix}PASSWORD"))
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
            eager=self.bool_(f"{key}['EAGER']", raw.get("EAGER")),
            cluster=cluster,
        )

    def env_location(self, key: str, prefix: str) -> tuple[str | None, list[str] | None]:
        """Read an alias's ``<prefix>URL`` or ``<prefix>CLUSTER`` (a comma list of node
        URLs) from the environment; both set is an error."""
        url = self.envval(f"{prefix}URL")
        nodes = self.envval(f"{prefix}CLUSTER", "list")
        if url is not None and nodes is not None:
            self.error(key, f"The environment sets both {prefix}URL and {prefix}CLUSTER for "
                       f"{key}.", f"Unset one: {prefix}CLUSTER for a Redis Cluster, "
                       f"{prefix}URL for one server.", 113)
            return url, None
        return url, nodes

    def worker(self, raw: Any) -> WorkerSettings:
        if not isinstance(raw, Mapping):
            self.error("QLESS['WORKER']", "QLESS['WORKER'] must be a dict.",
                       'Use "WORKER": {"QUEUES": ["default"], "PROCESSES": 2}.', 30)
            return WorkerSettings()
        keys = setting_keys()
        for unknown in sorted(set(raw) - keys):
            self.error(f"QLESS['WORKER'][{unknown!r}]", f"QLESS['WORKER'] has an unknown key "
                       f"{unknown!r}.", f"Valid keys: {', '.join(sorted(keys))}.", 31)
        values = {spec.name: self.worker_value(spec, raw) for spec in option_specs.OPTIONS
                  if spec.setting is not None}
        known = WorkerSettings.__dataclass_fields__
        return WorkerSettings(**{n: v for n, v in values.items() if v is not None and n in known},
                              values=values)

    def worker_value(self, spec: OptionSpec, raw: Mapping[str, Any]) -> Any:
        """Parse one QLESS["WORKER"] key as its option declares (None: not set, or refused)."""
        assert spec.setting is not None
        key = f"QLESS['WORKER'][{spec.setting!r}]"
        env_kind = _ENV_KINDS.get(spec.kind, "str")
        value = raw.get(spec.setting, self.envval(spec.env, env_kind) if spec.env else None)
        if spec.kind == "queues":
            return (value and self.queue_list(key, value)) or None
        if spec.kind == "choice":
            if value and value not in spec.choices:
                self.error(key, f"{key} is {value!r}.", f"Use one of {', '.join(spec.choices)}.",
                           32)
                return None
            return value or None
        if spec.kind in ("int", "number"):
            found = self.number(key, value, integer=spec.kind == "int",
                                minimum=spec.setting_minimum or 0)
            return float(found) if found is not None and spec.kind == "number" else found
        if spec.kind in ("flag", "no_flag"):
            return self.bool_(key, value)
        return value

    def receivers(self, raw: Any) -> ReceiverSettings:
        k = "QLESS['RECEIVERS']"
        if not isinstance(raw, Mapping):
            self.error(k, f"{k} must be a dict.", 'Use "RECEIVERS": {"WEBHOOK_URL": "..."}.', 40)
            return ReceiverSettings()
        for unknown in sorted(set(raw) - RECEIVER_KEYS):
            self.error(f"{k}[{unknown!r}]", f"{k} has an unknown key {unknown!r}.",
                       f"Valid keys: {', '.join(sorted(RECEIVER_KEYS))}.", 41)
        url = raw.get("WEBHOOK_URL")
        if url is not None and (not isinstance(url, str)
                                or urlsplit(url).scheme not in ("http", "https")):
            self.error(f"{k}['WEBHOOK_URL']", f"{k}['WEBHOOK_URL'] must be an http(s) URL.",
                       'Use "https://hooks.example.com/qless".', 42)
            url = None
        events = raw.get("WEBHOOK_EVENTS", ("completed", "failed"))
        if isinstance(events, str) or not isinstance(events, list | tuple):
            self.error(f"{k}['WEBHOOK_EVENTS']", f"{k}['WEBHOOK_EVENTS'] must be a list.",
                       'Use ["completed", "failed"].', 43)
            events = ()
        timeout = self.number(f"{k}['WEBHOOK_TIMEOUT']", raw.get("WEBHOOK_TIMEOUT", 5.0),
                              integer=False, minimum=0.001)
        return ReceiverSettings(
            mail_admins_on_failure=bool(self.bool_(f"{k}['MAIL_ADMINS_ON_FAILURE']",
                                                   raw.get("MAIL_ADMINS_ON_FAILURE", False))),
            webhook_url=url,
            webhook_events=tuple(events),
            webhook_timeout=5.0 if timeout is None else float(timeout),
        )


def _close_key(name: object, known: Iterable[str]) -> str | None:
    """Return the known key closest to a misspelt one, if any is close."""
    import difflib

    if not isinstance(name, str):
        return None
    close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.7)
    return close[0] if close else None


def _no_default_alias(p: _Parser, names: list[str]) -> None:
    """Report aliases without a "default" one: a typo, or jobs going to an implicit server."""
    import difflib

    if not names:
        return
    close = difflib.get_close_matches(DEFAULT_ALIAS, names, n=1, cutoff=0.75)
    if close:
        p.error(f"QLESS[{close[0]!r}]", f"QLESS has an alias {close[0]!r} but no 'default' "
                "alias; did you mean 'default'?",
                f"Rename QLESS[{close[0]!r}] to QLESS['default'] (jobs not routed elsewhere "
                "go to the 'default' alias).", 57)
        return
    p.warn("QLESS", f"QLESS defines the aliases {', '.join(map(repr, names))} but no "
           "'default': jobs not routed elsewhere go to $QLESS_URL, else "
           f"{DEFAULT_URL}.",
           'Add "default": {"URL": ...} (or "default": {} to keep the environment URL).', 58)


def parse_settings(raw: Any, env: environ.Env | None = None
                   ) -> tuple[QlessSettings, list[Problem]]:
    """Parse a raw ``QLESS`` value; return the settings and every problem found."""
    p = _Parser(env or environ.Env())
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        p.error("QLESS", f"QLESS must be a dict, not {type(raw).__name__}.",
                f'Use QLESS = {{"default": {{"URL": "{DEFAULT_URL}"}}}}.', 50)
        raw = {}
    aliases: dict[str, AliasSettings] = {}
    for name, value in raw.items():
        if name in GLOBAL_KEYS:
            continue
        if not isinstance(name, str) or not _ALIAS_RE.match(name):
            valid = ", ".join(sorted(GLOBAL_KEYS))
            guess = _close_key(name, GLOBAL_KEYS)
            p.error(f"QLESS[{name!r}]", f"QLESS has an unknown key {name!r}"
                    + (f"; did you mean {guess!r}?" if guess else "."),
                    f"Aliases are lowercase names like 'default'; global keys are: {valid}.", 51)
            continue
        alias = p.alias(name, value)
        if alias is not None:
            aliases[name] = alias
    if DEFAULT_ALIAS not in raw:
        _no_default_alias(p, [name for name in raw if name not in GLOBAL_KEYS
                              and isinstance(name, str) and _ALIAS_RE.match(name)])
    if DEFAULT_ALIAS not in aliases and DEFAULT_ALIAS not in raw:
        alias = p.alias(DEFAULT_ALIAS, {})
        if alias is not None:
            aliases[DEFAULT_ALIAS] = alias
    queues = raw.get("QUEUES", {})
    if not isinstance(queues, Mapping):
        p.error("QLESS['QUEUES']", "QLESS['QUEUES'] must map queue names to aliases.",
                'Use "QUEUES": {"reports": "reports"}.', 52)
        queues = {}
    for queue, target in queues.items():
        if not isinstance(queue, str) or not _QUEUE_RE.match(queue):
            p.error("QLESS['QUEUES']", f"QLESS['QUEUES'] has an invalid queue name {queue!r}.",
                    "Queue names are 1-64 characters of letters, digits, '_', '.', '-'.", 53)
        elif target not in aliases:
            p.error(f"QLESS['QUEUES'][{queue!r}]",
                    f"Queue {queue!r} is routed to unknown alias {target!r}.",
                    f"Define QLESS[{target!r}] or route to one of: {', '.join(aliases)}.", 54)
    placed_elsewhere(p, aliases, queues if isinstance(queues, Mapping) else {})
    commit_mode = raw.get("COMMIT_MODE", p.envval("QLESS_COMMIT_MODE")) or "on_commit"
    if commit_mode not in COMMIT_MODES:
        p.error("QLESS['COMMIT_MODE']", f"QLESS['COMMIT_MODE'] is {commit_mode!r}.",
                'Use "on_commit" (default: enqueue after the transaction commits) or '
                '"immediate".', 55)
        commit_mode = "on_commit"
    modules = raw.get("JOB_MODULES", ())
    if isinstance(modules, str) or not isinstance(modules, list | tuple) or not all(
            isinstance(m, str) and m for m in modules):
        p.error("QLESS['JOB_MODULES']", "QLESS['JOB_MODULES'] must be a list of module names.",
                'Use "JOB_MODULES": ["myapp.jobs"].', 56)
        modules = ()
    eager = p.bool_("QLESS['EAGER']", raw.get("EAGER", p.envval("QLESS_EAGER", "bool")))
    result = QlessSettings(
        aliases=aliases,
        queues={q: a for q, a in queues.items() if a in aliases},
        worker=p.worker(raw.get("WORKER", {})),
        commit_mode=commit_mode,
        job_modules=tuple(modules),
        autodiscover=bool(p.bool_("QLESS['AUTODISCOVER']", raw.get("AUTODISCOVER", True))),
        eager=bool(eager),
        receivers=p.receivers(raw.get("RECEIVERS", {})),
    )
    return result, p.problems
