"""Find ``@job`` definitions a worker would never import (say in an app's ``tasks.py``).

Workers import ``<app>.jobs`` of every installed app and the modules under
``QLESS["JOB_MODULES"]``; a job decorated anywhere else is registered in the web process
(which imported it to enqueue) but unknown to the worker. The check reads the source of each
app's ``tasks`` module with ``ast`` (nothing is imported) and warns at ``manage.py check``
and when ``qless_worker`` starts; the worker's "not a registered job" failure carries the
same advice.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

from django.apps import AppConfig, apps

from django_qless.conf import get_settings

__all__ = ["StrayJobModule", "find_stray_job_modules", "task_modules", "tasks_backend_in_use",
           "unknown_job_hint"]

# Module names people reach for besides ``jobs``; only these are read, never imported.
SUSPECT_MODULES = ("tasks",)
# Where the ``@task`` decorator of django.tasks comes from (Django 6, or the backport).
TASK_PACKAGES = ("django.tasks", "django_tasks")


@dataclass(frozen=True)
class StrayJobModule:
    """An app module that defines ``@job`` jobs no worker imports."""

    app_label: str
    module: str
    jobs_module: str
    names: tuple[str, ...]

    def advice(self) -> str:
        """Return how to make the worker import it."""
        path = self.module.replace(".", "/") + ".py"
        return (f"rename {path} to jobs.py, import it from {self.jobs_module}, or add "
                f"{self.module!r} to QLESS['JOB_MODULES']")


def _source(module: str) -> str | None:
    """Return a module's source text without importing it (None if there is none)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.loader is None or not spec.origin or not spec.has_location:
        return None
    try:
        with open(spec.origin, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _parse(text: str | None) -> ast.Module | None:
    if text is None:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _job_names(tree: ast.Module) -> tuple[str, ...]:
    """Return the names decorated with django_qless's ``job`` in a parsed module."""
    aliases: set[str] = set()  # local names bound to django_qless.job
    modules: set[str] = set()  # local names bound to the django_qless package
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django_qless"):
            aliases.update(a.asname or a.name for a in node.names if a.name == "job")
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names
                           if a.name in ("django_qless", "django_qless.decorators"))
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if isinstance(target, ast.Name) and target.id in aliases:
                found.append(node.name)
            elif (isinstance(target, ast.Attribute) and target.attr == "job"
                  and isinstance(target.value, ast.Name | ast.Attribute)
                  and ast.unparse(target.value) in modules):
                found.append(node.name)
    return tuple(found)


def _imports(tree: ast.Module | None, package: str, module: str) -> bool:
    """Tell whether a parsed module (in ``package``) imports ``module``."""
    if tree is None:
        return False
    short = module.rsplit(".", 1)[1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == module for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([package, base]) if base else package
            if base == module or (base == package and any(a.name == short for a in node.names)):
                return True
    return False


def _covered(module: str) -> bool:
    """Tell whether ``QLESS["JOB_MODULES"]`` lets a worker import ``module``."""
    return any(module == p or module.startswith(p + ".") for p in get_settings().job_modules)


def _defines_tasks(tree: ast.Module) -> bool:
    """Tell whether a parsed module decorates anything with django.tasks' ``task``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in TASK_PACKAGES:
            names.update(a.asname or a.name for a in node.names if a.name == "task")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Name) and target.id in names:
                    return True
    return False


def task_modules(app_configs: Iterable[AppConfig] | None = None) -> list[str]:
    """Return each app's ``tasks`` module that defines django.tasks tasks (read, not
    imported): a worker imports these to find the tasks it may run."""
    found = []
    for config in app_configs if app_configs is not None else apps.get_app_configs():
        module = f"{config.name}.tasks"
        tree = _parse(_source(module))
        if tree is not None and _defines_tasks(tree):
            found.append(module)
    return found


def tasks_backend_in_use() -> bool:
    """Tell whether workers import app ``tasks`` modules (the django.tasks backend is used)."""
    from django_qless.registry import tasks_backend_in_use as in_use

    return in_use()


def find_stray_job_modules(app_configs: Iterable[AppConfig] | None = None
                           ) -> list[StrayJobModule]:
    """Return each app module that defines ``@job`` jobs and that no worker would import."""
    autodiscover = get_settings().autodiscover
    configs = list(app_configs if app_configs is not None else apps.get_app_configs())
    imported_task_modules = set(task_modules(configs)) if tasks_backend_in_use() else set()
    found = []
    for config in configs:
        jobs_module = f"{config.name}.jobs"
        for suffix in SUSPECT_MODULES:
            module = f"{config.name}.{suffix}"
            if module in imported_task_modules:
                continue  # workers import it to find its django.tasks tasks
            tree = _parse(_source(module))
            names = _job_names(tree) if tree is not None else ()
            if not names or _covered(module):
                continue
            if autodiscover and _imports(_parse(_source(jobs_module)), config.name, module):
                continue
            found.append(StrayJobModule(config.label, module, jobs_module, names))
    return found


def unknown_job_hint(klass_name: str) -> str | None:
    """Explain why a worker does not know ``klass_name`` when its module is an app's."""
    module = klass_name.rpartition(".")[0]
    for config in apps.get_app_configs():
        if not module.startswith(config.name + ".") or module == f"{config.name}.jobs":
            continue
        return (f"workers import only <app>.jobs modules and QLESS['JOB_MODULES']; if it is a "
                f"@job in {module}, move it to {config.name}.jobs, import {module} from "
                f"{config.name}.jobs, or add {module!r} to QLESS['JOB_MODULES']")
    return None
