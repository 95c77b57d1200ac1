"""Turn a raw ``QLESS`` value into a ``QlessSettings``, collecting every problem.

Global keys here (``QUEUES``, ``WORKER``, ``COMMIT_MODE``, ``JOB_MODULES``, ``AUTODISCOVER``,
``EAGER``, ``RECEIVERS``); each alias is checked by ``aliases``, its cluster keys by
``cluster``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import environ

from django_qless.conf.aliases import close_key, parse_alias
from django_qless.conf.cluster import placed_elsewhere
from django_qless.conf.model import (
    COMMIT_MODES,
    DEFAULT_ALIAS,
    DEFAULT_URL,
    GLOBAL_KEYS,
    RECEIVER_KEYS,
    AliasSettings,
    Problem,
    QlessSettings,
    ReceiverSettings,
    WorkerSettings,
)
from django_qless.conf.reporter import ALIAS_RE, QUEUE_RE, Reporter
from django_qless.core import worker_options
from django_qless.core.worker_options import OptionSpec, setting_keys

__all__ = ["parse_receivers", "parse_settings", "parse_worker"]

# How an option's environment variable is read (django-environ's readers), by option kind.
_ENV_KINDS = {"int": "int", "number": "float", "flag": "bool", "no_flag": "bool",
              "queues": "list"}


def parse_worker(p: Reporter, raw: Any) -> WorkerSettings:
    """Check QLESS["WORKER"]: every key an option of the worker declares."""
    if not isinstance(raw, Mapping):
        p.error("QLESS['WORKER']", "QLESS['WORKER'] must be a dict.",
                'Use "WORKER": {"QUEUES": ["default"], "PROCESSES": 2}.', 30)
        return WorkerSettings()
    keys = setting_keys()
    for unknown in sorted(set(raw) - keys):
        p.error(f"QLESS['WORKER'][{unknown!r}]", f"QLESS['WORKER'] has an unknown key "
                f"{unknown!r}.", f"Valid keys: {', '.join(sorted(keys))}.", 31)
    values = {spec.name: worker_value(p, spec, raw) for spec in worker_options.OPTIONS
              if spec.setting is not None}
    known = WorkerSettings.__dataclass_fields__
    return WorkerSettings(**{n: v for n, v in values.items() if v is not None and n in known},
                          values=values)


def worker_value(p: Reporter, spec: OptionSpec, raw: Mapping[str, Any]) -> Any:
    """Parse one QLESS["WORKER"] key as its option declares (None: not set, or refused)."""
    assert spec.setting is not None
    key = f"QLESS['WORKER'][{spec.setting!r}]"
    env_kind = _ENV_KINDS.get(spec.kind, "str")
    value = raw.get(spec.setting, p.envval(spec.env, env_kind) if spec.env else None)
    if spec.kind == "queues":
        return (value and p.queue_list(key, value)) or None
    if spec.kind == "choice":
        if value and value not in spec.choices:
            p.error(key, f"{key} is {value!r}.", f"Use one of {', '.join(spec.choices)}.",
                    32)
            return None
        return value or None
    if spec.kind in ("int", "number"):
        found = p.number(key, value, integer=spec.kind == "int",
                         minimum=spec.setting_minimum or 0)
        return float(found) if found is not None and spec.kind == "number" else found
    if spec.kind in ("flag", "no_flag"):
        return p.bool_(key, value)
    if spec.kind == "str" and value is not None and not isinstance(value, str):
        p.error(key, f"{key} must be a string, not {type(value).__name__}.",
                'Use a path such as "/tmp/qless-worker.health".', 33)
        return None
    return value


def parse_receivers(p: Reporter, raw: Any) -> ReceiverSettings:
    """Check QLESS["RECEIVERS"], the switches of the optional receivers."""
    k = "QLESS['RECEIVERS']"
    if not isinstance(raw, Mapping):
        p.error(k, f"{k} must be a dict.", 'Use "RECEIVERS": {"WEBHOOK_URL": "..."}.', 40)
        return ReceiverSettings()
    for unknown in sorted(set(raw) - RECEIVER_KEYS):
        p.error(f"{k}[{unknown!r}]", f"{k} has an unknown key {unknown!r}.",
                f"Valid keys: {', '.join(sorted(RECEIVER_KEYS))}.", 41)
    url = raw.get("WEBHOOK_URL")
    if url is not None and (not isinstance(url, str)
                            or urlsplit(url).scheme not in ("http", "https")):
        p.error(f"{k}['WEBHOOK_URL']", f"{k}['WEBHOOK_URL'] must be an http(s) URL.",
                'Use "https://hooks.example.com/qless".', 42)
        url = None
    events = raw.get("WEBHOOK_EVENTS", ("completed", "failed"))
    if isinstance(events, str) or not isinstance(events, list | tuple):
        p.error(f"{k}['WEBHOOK_EVENTS']", f"{k}['WEBHOOK_EVENTS'] must be a list.",
                'Use ["completed", "failed"].', 43)
        events = ()
    timeout = p.number(f"{k}['WEBHOOK_TIMEOUT']", raw.get("WEBHOOK_TIMEOUT", 5.0),
                       integer=False, minimum=0.001)
    return ReceiverSettings(
        mail_admins_on_failure=bool(p.bool_(f"{k}['MAIL_ADMINS_ON_FAILURE']",
                                            raw.get("MAIL_ADMINS_ON_FAILURE", False))),
        webhook_url=url,
        webhook_events=tuple(events),
        webhook_timeout=5.0 if timeout is None else float(timeout),
    )



def _no_default_alias(p: Reporter, names: list[str]) -> None:
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
    p = Reporter(env or environ.Env())
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
        if not isinstance(name, str) or not ALIAS_RE.match(name):
            valid = ", ".join(sorted(GLOBAL_KEYS))
            guess = close_key(name, GLOBAL_KEYS)
            p.error(f"QLESS[{name!r}]", f"QLESS has an unknown key {name!r}"
                    + (f"; did you mean {guess!r}?" if guess else "."),
                    f"Aliases are lowercase names like 'default'; global keys are: {valid}.", 51)
            continue
        alias = parse_alias(p, name, value)
        if alias is not None:
            aliases[name] = alias
    if DEFAULT_ALIAS not in raw:
        _no_default_alias(p, [name for name in raw if name not in GLOBAL_KEYS
                              and isinstance(name, str) and ALIAS_RE.match(name)])
    if DEFAULT_ALIAS not in aliases and DEFAULT_ALIAS not in raw:
        alias = parse_alias(p, DEFAULT_ALIAS, {})
        if alias is not None:
            aliases[DEFAULT_ALIAS] = alias
    queues = raw.get("QUEUES", {})
    if not isinstance(queues, Mapping):
        p.error("QLESS['QUEUES']", "QLESS['QUEUES'] must map queue names to aliases.",
                'Use "QUEUES": {"reports": "reports"}.', 52)
        queues = {}
    for queue, target in queues.items():
        if not isinstance(queue, str) or not QUEUE_RE.match(queue):
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
        worker=parse_worker(p, raw.get("WORKER", {})),
        commit_mode=commit_mode,
        job_modules=tuple(modules),
        autodiscover=bool(p.bool_("QLESS['AUTODISCOVER']", raw.get("AUTODISCOVER", True))),
        eager=bool(eager),
        receivers=parse_receivers(p, raw.get("RECEIVERS", {})),
    )
    return result, p.problems
