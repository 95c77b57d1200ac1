"""Settings a new user gets wrong on the first day: a misspelt alias key, a shadowed QLESS_URL."""

from __future__ import annotations

import environ
from django.core import checks
from django.test import override_settings

from django_qless.conf import parse


def env(**values: str) -> environ.Env:
    """An Env reading only the given variables."""
    e = environ.Env()
    e.ENVIRON = dict(values)
    return e


def problems(raw, **environ_values):
    return parse(raw, env(**environ_values))[1]


def test_a_misspelt_alias_key_gets_did_you_mean():
    found = problems({"default": {"URl": "redis://x:6379/0"}})
    messages = [p.message for p in found if p.id == "django_qless.E021"]
    assert messages == ["QLESS['default'] has an unknown key 'URl'; did you mean 'URL'?"]
    other = problems({"default": {"URL": "redis://x/0", "SOCKET_TIMOUT": 3}})
    assert any("did you mean 'SOCKET_TIMEOUT'?" in p.message for p in other)
    far = problems({"default": {"URL": "redis://x/0", "BANANA": 1}})
    assert any(p.message.endswith("unknown key 'BANANA'.") for p in far)


def test_qless_url_in_the_environment_shadowed_by_settings_warns():
    found = problems({"default": {"URL": "redis://set:6379/0"}},
                     QLESS_URL="redis://:secret@env:6379/0")
    warned = [p for p in found if p.id == "django_qless.W116"]
    assert len(warned) == 1 and warned[0].warning and warned[0].key == "QLESS_URL"
    assert "QLESS_URL is set, but QLESS['default'] sets URL" in warned[0].message
    assert "secret" not in warned[0].message + warned[0].hint
    # Settings that read the variable themselves, or no URL in settings: no warning.
    assert not [p for p in problems({"default": {"URL": "redis://env:6379/0"}},
                                    QLESS_URL="redis://env:6379/0") if p.warning]
    assert not [p for p in problems({"default": {}}, QLESS_URL="redis://env:6379/0")
                if p.warning]
    named = problems({"default": {}, "reports": {"URL": "redis://a/0"}},
                     QLESS_REPORTS_URL="redis://b/0")
    assert [p.key for p in named if p.id == "django_qless.W116"] == ["QLESS_REPORTS_URL"]


def test_the_shadowed_variable_is_a_system_check_warning(monkeypatch, redis_url):
    from django_qless.conf import clear_cache

    monkeypatch.setenv("QLESS_URL", "redis://elsewhere:6379/0")
    clear_cache()
    with override_settings(QLESS={"default": {"URL": redis_url}}):
        found = checks.run_checks(tags=["django_qless"])
    clear_cache()
    assert [m.id for m in found if m.id == "django_qless.W116"] == ["django_qless.W116"]
