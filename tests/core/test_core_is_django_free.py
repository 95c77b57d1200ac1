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


def run_python(code: str) -> str:
    """Run `code` in a fresh interpreter at the repository's root; return what it printed."""
    root = Path(django_qless.core.__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_core_modules_found() -> None:
    """Discover at least the modules the harness itself relies on."""
    names = core_modules()
    assert "django_qless.core.engine.lua" in names
    assert "django_qless.core.cluster.sharded" in names


def test_every_exported_name_resolves() -> None:
    """Each name `django_qless.core` re-exports lazily can be imported."""
    for name in django_qless.core.__all__:
        assert getattr(django_qless.core, name) is not None, name


def test_test_servers_are_not_shipped() -> None:
    """The servers that tests and benchmarks start live outside the package."""
    root = Path(django_qless.core.__file__).resolve().parents[1]
    assert not [path for path in root.rglob("*.py") if "LocalCluster" in path.read_text()]


def test_a_client_of_one_server_loads_no_cluster_module(redis_url: str) -> None:
    """Put and read a job through a client of one server: no cluster or shard module runs."""
    code = (
        "import sys\n"
        "from django_qless.core import Client\n"
        f"client = Client({redis_url!r})\n"
        "jid = client.queues['q'].put('shop.Job', {'n': 1})\n"
        "assert client.jobs[jid].data == {'n': 1}\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_qless.core.cluster')))\n"
    )
    assert run_python(code) == "[]"


def test_a_serial_worker_of_one_server_loads_no_cluster_module(redis_url: str) -> None:
    """Run one job with a serial worker of one server: no cluster or shard module runs."""
    code = (
        "import sys\n"
        "from django_qless.core import Client\n"
        "from django_qless.core.registry import register\n"
        "from django_qless.core.worker_cli import main\n"
        "register('shop.Job')(lambda job: None)\n"
        f"client = Client({redis_url!r})\n"
        "client.queues['q'].put('shop.Job', {'n': 1})\n"
        f"assert main(['--url', {redis_url!r}, '-n', '0', '--max-jobs', '1', 'q']) == 0\n"
        "assert client.redis.zcard('ql:completed') == 1\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_qless.core.cluster')))\n"
    )
    assert run_python(code) == "[]"


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
    run_python(code)
