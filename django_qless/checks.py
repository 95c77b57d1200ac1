"""System checks: settings shape and the engine script (no network I/O, except --deploy)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from django_qless.settings import get_problems, get_settings

__all__ = ["check_deploy", "check_engine", "check_job_modules", "check_settings",
           "check_stray_jobs", "check_stray_settings"]

TAG = "django_qless"


@register(TAG, Tags.compatibility)
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                   ) -> list[CheckMessage]:
    """Report every invalid ``QLESS`` key with its fix."""
    messages: list[CheckMessage] = []
    for problem in get_problems():
        cls = Warning if problem.warning else Error
        messages.append(cls(problem.message, hint=problem.hint, obj=problem.key, id=problem.id))
    return messages


@register(TAG)
def check_job_modules(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                      ) -> list[CheckMessage]:
    """Warn about ``JOB_MODULES`` entries that cannot be found (without importing them)."""
    if any(not p.warning for p in get_problems()):
        return []
    messages: list[CheckMessage] = []
    for module in get_settings().job_modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            messages.append(Warning(
                f"QLESS['JOB_MODULES'] lists {module!r}, which cannot be found.",
                hint="Fix the module path or remove it; jobs under it cannot run.",
                obj="QLESS['JOB_MODULES']", id="django_qless.W060"))
    return messages


@register(TAG)
def check_stray_jobs(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                     ) -> list[CheckMessage]:
    """Warn about ``@job`` jobs in app modules no worker imports (an app's ``tasks.py``)."""
    from django_qless.discovery import find_stray_job_modules

    if any(not p.warning for p in get_problems()):
        return []
    return [Warning(
        f"{stray.module} defines @job {', '.join(stray.names)}, but workers import only "
        f"<app>.jobs modules and QLESS['JOB_MODULES']: these jobs would fail as "
        f"django_qless.UnknownJob.",
        hint=f"To let workers run them, {stray.advice()}.", obj=stray.module,
        id="django_qless.W061") for stray in find_stray_job_modules(app_configs)]


@register(TAG)
def check_stray_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                         ) -> list[CheckMessage]:
    """Warn about ``QLESS_*`` Django settings, which django-qless never reads."""
    from django.conf import settings

    read = {"QLESS", "QLESS_UI"}
    messages: list[CheckMessage] = []
    for name in sorted(n for n in dir(settings) if n.startswith("QLESS_") and n not in read):
        key = name.removeprefix("QLESS_")
        if key in ("URL", "CLUSTER", "USERNAME", "PASSWORD"):
            where = f'QLESS = {{"default": {{"{key}": ...}}}}'
        else:
            where = "the matching key of QLESS (see the QLESS setting's documentation)"
        messages.append(Warning(
            f"The Django setting {name} is ignored: django-qless reads {name} from the "
            "environment only, and its settings from QLESS.",
            hint=f"Set the environment variable {name}, or use {where}; then remove the "
                 f"{name} setting.",
            obj=name, id="django_qless.W062"))
    return messages


@register(TAG)
def check_engine(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                 ) -> list[CheckMessage]:
    """Check that the engine's Lua script can be assembled from the package files."""
    from django_qless.core.engine import lua

    try:
        text = lua.script_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [Error(f"The qless engine script cannot be read: {exc}",
                      hint="Reinstall django-qless; its lua/*.lua files are missing.",
                      id="django_qless.E070")]
    if "-- ==== api.lua ====" not in text:
        return [Error("The qless engine script is incomplete (no api.lua).",
                      hint="Reinstall django-qless.", id="django_qless.E071")]
    return []


@register(TAG, deploy=True)
def check_deploy(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                 ) -> list[CheckMessage]:
    """Under ``--deploy``: flag insecure connections, ping every alias, require noeviction."""
    import redis

    from django_qless.core.exceptions import QlessConnectionError
    from django_qless.core.health import SAFE_POLICY, probe

    if any(not p.warning for p in get_problems()):
        return []
    conf = get_settings()
    messages: list[CheckMessage] = []
    if conf.eager or any(a.eager for a in conf.aliases.values()):
        messages.append(Warning("QLESS EAGER is on: jobs run inline, not in workers.",
                                hint="Set EAGER only in tests.", id="django_qless.W080"))
    for alias, settings in conf.aliases.items():
        where = f"QLESS[{alias!r}] ({settings.display})"
        messages.extend(_connection_warnings(alias, where, settings))
        try:
            probes = _probe_alias(settings, probe)
        except (redis.RedisError, QlessConnectionError) as exc:
            messages.append(Error(f"{where} cannot be reached: {type(exc).__name__}: {exc}",
                                  hint="Check the URL, credentials, TLS settings and network.",
                                  obj=alias, id="django_qless.E081"))
            continue
        for node, (policy, skew) in probes:
            messages.extend(_probe_messages(alias, where + node, policy, skew, SAFE_POLICY))
    return messages


def _probe_alias(settings: Any, probe: Any) -> list[tuple[str, Any]]:
    """Probe an alias's server, or every primary of its cluster: [(" node h:p", probe)]."""
    from django_qless.clients import build_redis, build_redis_cluster

    if settings.cluster is None:
        conn = build_redis(settings)
        try:
            return [("", probe(conn))]
        finally:
            conn.close()
    cluster = build_redis_cluster(settings)
    try:
        return [(f" node {node.name}", probe(cluster.get_redis_connection(node)))
                for node in cluster.get_primaries()]  # type: ignore[no-untyped-call, unused-ignore]
    finally:
        cluster.close()


def _probe_messages(alias: str, where: str, policy: str, skew: float, safe: str
                    ) -> list[CheckMessage]:
    """Report a server that evicts keys or whose clock is far off this host's."""
    messages: list[CheckMessage] = []
    if policy != safe:
        messages.append(Error(
            f"{where} uses maxmemory-policy {policy!r}; eviction deletes queued jobs.",
            hint="Set maxmemory-policy noeviction on this Redis.",
            obj=alias, id="django_qless.E082"))
    if abs(skew) > 5:
        messages.append(Warning(
            f"This host's clock is {skew:+.1f}s off {where}'s clock.",
            hint="Run NTP. The engine uses the Redis clock, but logs and schedules you "
                 "compute locally will disagree with it.",
            obj=alias, id="django_qless.W085"))
    return messages


def _connection_warnings(alias: str, where: str, settings: Any) -> list[CheckMessage]:
    """Warn about a remote Redis reached without a password or without TLS."""
    from urllib.parse import urlsplit

    from django_qless.core.health import ACL_CHANNELS, ACL_KEYS

    if settings.cluster is not None:
        # One user and one scheme apply to every node (the settings refuse a mix).
        hosts = [host for host, _ in settings.cluster.addresses]
        scheme, url_password = settings.scheme, None
    elif settings.sentinels or not settings.url:
        return []
    else:
        parts = urlsplit(settings.url)
        hosts, scheme, url_password = [parts.hostname], parts.scheme, parts.password
    if scheme == "unix" or all(h in (None, "localhost", "127.0.0.1", "::1") for h in hosts):
        return []
    messages: list[CheckMessage] = []
    if not (settings.password or url_password):
        messages.append(Warning(
            f"{where} is a remote Redis reached without a password.",
            hint=f"Create an ACL user limited to {ACL_KEYS} and {ACL_CHANNELS} and put its "
                 "credentials in QLESS_URL (see docs/guarantees.md).",
            obj=alias, id="django_qless.W083"))
    if scheme != "rediss":
        messages.append(Warning(
            f"{where} is a remote Redis reached without TLS.",
            hint="Use a rediss:// URL so job data and credentials are encrypted.",
            obj=alias, id="django_qless.W084"))
    return messages
