"""System checks: settings shape and the engine script (no network I/O, except --deploy)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from django_qless.conf import get_problems, get_settings

__all__ = ["check_deploy", "check_engine", "check_job_modules", "check_settings"]

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
def check_engine(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
                 ) -> list[CheckMessage]:
    """Check that the engine's Lua script can be assembled from the package files."""
    from django_qless.core import lua

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
    """Under ``--deploy``: ping every alias and require ``maxmemory-policy noeviction``."""
    import redis

    from django_qless.clients import build_redis

    if any(not p.warning for p in get_problems()):
        return []
    conf = get_settings()
    messages: list[CheckMessage] = []
    if conf.eager or any(a.eager for a in conf.aliases.values()):
        messages.append(Warning("QLESS EAGER is on: jobs run inline, not in workers.",
                                hint="Set EAGER only in tests.", id="django_qless.W080"))
    for alias, settings in conf.aliases.items():
        where = f"QLESS[{alias!r}] ({settings.display})"
        conn = build_redis(settings)
        try:
            conn.ping()
            policy = _eviction_policy(conn)
        except redis.RedisError as exc:
            messages.append(Error(f"{where} cannot be reached: {type(exc).__name__}: {exc}",
                                  hint="Check the URL, credentials, TLS settings and network.",
                                  obj=alias, id="django_qless.E081"))
            continue
        finally:
            conn.close()
        if policy is not None and policy != "noeviction":
            messages.append(Error(
                f"{where} uses maxmemory-policy {policy!r}; eviction deletes queued jobs.",
                hint="Set maxmemory-policy noeviction on this Redis.",
                obj=alias, id="django_qless.E082"))
    return messages


def _eviction_policy(conn: Any) -> str | None:
    """Return the server's eviction policy (CONFIG GET, else INFO memory)."""
    import redis

    try:
        reply = conn.config_get("maxmemory-policy")
        if reply:
            return str(reply.get("maxmemory-policy"))
    except redis.ResponseError:
        pass  # managed Redis often forbids CONFIG
    info = conn.info("memory")
    value = info.get("maxmemory_policy")
    return None if value is None else str(value)
