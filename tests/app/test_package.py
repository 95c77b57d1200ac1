"""The package root: lazy re-exports, no Django import until a Django name is used."""

from __future__ import annotations

import subprocess
import sys

import django_qless
from tests.app.helpers import ROOT


def test_lazy_names_resolve_and_all_is_complete():
    assert set(django_qless.__all__) == set(django_qless._LAZY) | {"__version__"}
    for name in django_qless._LAZY:
        assert getattr(django_qless, name) is not None
    assert django_qless.__version__ == "0.1.0"
    assert "job" in dir(django_qless)


def test_importing_the_package_does_not_import_django():
    code = ("import sys, django_qless, django_qless.core.client; "
            "assert 'django' not in sys.modules, 'django imported'; "
            "from django_qless import job; assert 'django' in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin",
                                            "DJANGO_SETTINGS_MODULE": "tests.app.settings"})
    assert result.returncode == 0, result.stderr


def test_unknown_attribute_raises():
    try:
        django_qless.nope  # noqa: B018
    except AttributeError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("no AttributeError")
