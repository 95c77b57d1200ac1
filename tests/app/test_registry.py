"""The Django side of the registry: autodiscovery, the JOB_MODULES allowlist, refusal."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from django_qless import registry as django_registry
from django_qless.core.exceptions import UnregisteredJobClass
from django_qless.core.registry import default_registry


def test_setup_autodiscovers_and_allows_job_modules(monkeypatch):
    calls = []
    monkeypatch.setattr(django_registry, "autodiscover_modules", calls.append)
    reg = django_registry.setup(force=True)
    assert calls == ["jobs"] and reg is default_registry
    assert "tests.app.legacy_jobs" in reg.module_prefixes
    assert reg.resolve("tests.app.legacy_jobs.Legacy").name == "tests.app.legacy_jobs.Legacy"
    with override_settings(QLESS={**settings.QLESS, "AUTODISCOVER": False}):
        django_registry.setup(force=True)
    assert calls == ["jobs"]


@pytest.mark.parametrize("name", [
    "tests.app.not_allowed.Sneaky", "os.system", "subprocess.Popen",
    "tests.app.legacy_jobs_evil.X", "tests.app.legacy_jobs._private",
])
def test_names_outside_the_registry_are_refused_without_import(name):
    django_registry.setup()
    assert not default_registry.is_allowed(name) or name.endswith("_private")
    with pytest.raises(UnregisteredJobClass):
        default_registry.resolve(name)


def test_decorated_jobs_and_the_tasks_shim_are_registered():
    reg = django_registry.get_registry()
    assert "tests.app.jobs.add" in reg and "tests.app.jobs.Thumbnail" in reg
    assert "django_qless.tasks_backend.DjangoTaskJob" in reg
    assert django_registry.UNKNOWN_JOB_GROUP == "django_qless.UnknownJob"


def test_the_unknown_job_group_has_one_definition():
    from django_qless.core import registry as core_registry
    from django_qless.core.workers import runner

    assert django_registry.UNKNOWN_JOB_GROUP is core_registry.UNKNOWN_JOB_GROUP
    assert runner.UNKNOWN_JOB_GROUP is core_registry.UNKNOWN_JOB_GROUP
