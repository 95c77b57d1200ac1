"""The core never imports Django: it is usable (and tested) without it."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import django_qless.core

__all__: list[str] = []


def core_modules() -> list[str]:
    """Every module and package under django_qless.core that exists right now."""
    names = ["django_qless.core"]
    for info in pkgutil.walk_packages(django_qless.core.__path__, "django_qless.core."):
        # A `__main__` module is an entry point: importing it may legitimately run it.
        if not info.name.endswith(".__main__"):
            names.append(info.name)
    return sorted(names)


def test_core_modules_found() -> None:
    """Discover at least the modules the harness itself relies on."""
    names = core_modules()
    assert "django_qless.core.engine.lua" in names
    assert "testservers.redis_server" in names


def test_core_is_django_free() -> None:
    """Import every core module in a fresh interpreter; django must stay unimported."""
    modules = core_modules()
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "leaked = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not leaked, leaked\n"
        "print(len(sys.modules))\n"
    )
    root = Path(django_qless.core.__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
