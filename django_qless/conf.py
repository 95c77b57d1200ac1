"""Read ``settings.QLESS`` (plus environment fallbacks) into frozen dataclasses.

Shape, like ``CACHES``: every lowercase key is a connection alias, the UPPERCASE keys are
global options::

    QLESS = {
        "default": {"URL": "redis://localhost:6379/0", "OPTIONS": {"socket_timeout": 10}},
        "reports": {"SENTINELS": [("10.0.0.1", 26379)], "MASTER_NAME": "mymaster",
                    "USERNAME": "qless", "PASSWORD": "..."},
        "QUEUES": {"reports": "reports"},          # queue name -> alias (default: "default")
        "WORKER": {"QUEUES": ["default"], "PROCESSES": 2, "RESERVER": "ordered",
                   "INTERVAL": 5.0, "TIMEOUT": None, "MAX_JOBS": None},
        "HEARTBEAT": None,                         # seconds; written to qless config by operators
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
``SSL_KEYFILE``, ``SOCKET_TIMEOUT`` and ``EAGER``.

Environment (django-environ; a value in settings always wins): ``QLESS_URL`` (default alias),
``QLESS_<ALIAS>_URL``, ``QLESS_<ALIAS>_PASSWORD``, ``QLESS_COMMIT_MODE``, ``QLESS_EAGER``,
``QLESS_WORKER_QUEUES`` (comma list), ``QLESS_WORKER_PROCESSES``, ``QLESS_WORKER_RESERVER``,
``QLESS_WORKER_INTERVAL``, ``QLESS_WORKER_TIMEOUT``, ``QLESS_HEARTBEAT``.
Without any setting or variable the default alias is ``redis://localhost:6379/0``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import parse_qs, urlsplit

import environ
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

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
RESERVERS = ("ordered", "round-robin", "shuffled")
GLOBAL_KEYS = frozenset(
    {"QUEUES", "WORKER", "HEARTBEAT", "COMMIT_MODE", "JOB_MODULES", "AUTODISCOVER", "EAGER",
     "RECEIVERS"}
)
ALIAS_KEYS = frozenset(
    {"URL", "USERNAME", "PASSWORD", "SENTINELS", "MASTER_NAME", "SENTINEL_KWARGS", "OPTIONS",
     "SSL_CERT_REQS", "SSL_CA_CERTS", "SSL_CERTFILE", "SSL_KEYFILE", "SOCKET_TIMEOUT", "EAGER"}
)
WORKER_KEYS = frozenset({"QUEUES", "PROCESSES", "RESERVER", "INTERVAL", "TIMEOUT", "MAX_JOBS"})
RECEIVER_KEYS = frozenset(
    {"MAIL_ADMINS_ON_FAILURE", "WEBHOOK_URL", "WEBHOOK_EVENTS", "WEBHOOK_TIMEOUT"}
)
SCHEMES = ("redis", "rediss", "unix")
_ALIAS_RE = re.compile(r"^[a-z0-9_][a-z0-9_-]{0,63}$")
_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


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

    @property
    def scheme(self) -> str:
        """Return ``sentinel`` or the URL's scheme."""
        return "sentinel" if self.sentinels else urlsplit(self.url or "").scheme

    @property
    def display(self) -> str:
        """Return a credential-free description of where this alias points."""
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
    heartbeat: int | None = None
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
        if url is None and not sentinels_raw:
            url = self.envval(f"{prefix}URL")
            if url is None and name == DEFAULT_ALIAS:
                url = DEFAULT_URL
        if url is not None and sentinels_raw:
            self.error(key, f"{key} sets both URL and SENTINELS.",
                       "Keep one: SENTINELS + MASTER_NAME for Sentinel, URL otherwise.", 22)
        if url is None and not sentinels_raw:
            self.error(f"{key}['URL']", f"{key} has no URL.",
                       f'Set "URL" or the environment variable {prefix}URL.', 23)
        if url is not None:
            self.url(f"{key}['URL']", url, raw)
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
        return AliasSettings(
            alias=name,
            url=url,
            username=raw.get("USERNAME", self.envval(f"{prefix}USERNAME")),
            password=raw.get("PASSWORD", self.envval(f"{prefix}PASSWORD")),
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
        )

    def worker(self, raw: Any) -> WorkerSettings:
        if not isinstance(raw, Mapping):
            self.error("QLESS['WORKER']", "QLESS['WORKER'] must be a dict.",
                       'Use "WORKER": {"QUEUES": ["default"], "PROCESSES": 2}.', 30)
            return WorkerSettings()
        for unknown in sorted(set(raw) - WORKER_KEYS):
            self.error(f"QLESS['WORKER'][{unknown!r}]", f"QLESS['WORKER'] has an unknown key "
                       f"{unknown!r}.", f"Valid keys: {', '.join(sorted(WORKER_KEYS))}.", 31)
        k = "QLESS['WORKER']"
        queues = raw.get("QUEUES", self.envval("QLESS_WORKER_QUEUES", "list"))
        reserver = raw.get("RESERVER", self.envval("QLESS_WORKER_RESERVER")) or "ordered"
        if reserver not in RESERVERS:
            self.error(f"{k}['RESERVER']", f"{k}['RESERVER'] is {reserver!r}.",
                       f"Use one of {', '.join(RESERVERS)}.", 32)
            reserver = "ordered"
        interval = self.number(f"{k}['INTERVAL']", raw.get(
            "INTERVAL", self.envval("QLESS_WORKER_INTERVAL", "float")), integer=False, minimum=0)
        return WorkerSettings(
            queues=(queues and self.queue_list(f"{k}['QUEUES']", queues)) or ("default",),
            processes=self.number(f"{k}['PROCESSES']", raw.get(
                "PROCESSES", self.envval("QLESS_WORKER_PROCESSES", "int")),
                integer=True, minimum=1),
            reserver=reserver,
            interval=5.0 if interval is None else float(interval),
            timeout=self.number(f"{k}['TIMEOUT']", raw.get(
                "TIMEOUT", self.envval("QLESS_WORKER_TIMEOUT", "float")),
                integer=False, minimum=0.001),
            max_jobs=self.number(f"{k}['MAX_JOBS']", raw.get("MAX_JOBS"), integer=True,
                                 minimum=1),
        )

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


def parse(raw: Any, env: environ.Env | None = None) -> tuple[QlessSettings, list[Problem]]:
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
            p.error(f"QLESS[{name!r}]", f"QLESS has an unknown key {name!r}.",
                    f"Aliases are lowercase names like 'default'; global keys are: {valid}.", 51)
            continue
        alias = p.alias(name, value)
        if alias is not None:
            aliases[name] = alias
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
    heartbeat = p.number("QLESS['HEARTBEAT']", raw.get(
        "HEARTBEAT", p.envval("QLESS_HEARTBEAT", "int")), integer=True, minimum=1)
    result = QlessSettings(
        aliases=aliases,
        queues={q: a for q, a in queues.items() if a in aliases},
        worker=p.worker(raw.get("WORKER", {})),
        heartbeat=heartbeat,
        commit_mode=commit_mode,
        job_modules=tuple(modules),
        autodiscover=bool(p.bool_("QLESS['AUTODISCOVER']", raw.get("AUTODISCOVER", True))),
        eager=bool(eager),
        receivers=p.receivers(raw.get("RECEIVERS", {})),
    )
    return result, p.problems


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
