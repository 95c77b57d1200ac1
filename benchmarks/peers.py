"""The systems under test: where each one's Python lives, and installing the peers' venvs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SYSTEMS", "System", "ensure_venv", "versions"]

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"


@dataclass(frozen=True)
class System:
    """One measured system: its adapter script and its pinned requirements (peers only)."""

    name: str
    adapter: str
    requirements: tuple[str, ...] = ()
    dist: str = ""  # distribution whose version is reported

    @property
    def is_peer(self) -> bool:
        """Return whether this system lives in its own venv under benchmarks/.venvs."""
        return bool(self.requirements)

    @property
    def venv(self) -> Path:
        """Return the venv directory of a peer."""
        return VENVS / self.name

    @property
    def python(self) -> str:
        """Return the interpreter that runs this system's adapter."""
        if not self.is_peer:
            return sys.executable  # django-qless: the project's own .venv
        return str(self.venv / "bin" / "python")


SYSTEMS = {
    s.name: s
    for s in (
        System("django-qless", "django_qless_.py", dist="django-qless"),
        # The floor: LPUSH / BRPOP with redis-py in the project's own venv (no library).
        System("raw", "raw_.py", dist="redis"),
        System("qless-py", "qless_py.py", ("qless-py==0.11.4",), "qless-py"),
        System("reqless", "reqless_.py", ("reqless==0.13.3",), "reqless"),
        System("rq", "rq_.py", ("rq>=2,<3",), "rq"),
        # huey declares no Redis client; its RedisHuey needs redis-py.
        System("huey", "huey_.py", ("huey>=3,<4", "redis"), "huey"),
    )
}


def ensure_venv(system: System, *, install: bool = True) -> None:
    """Create the peer's venv and pip-install its pinned requirements (once per spec)."""
    stamp = system.venv / ".bench-requirements"
    wanted = "\n".join(system.requirements)
    if stamp.is_file() and stamp.read_text() == wanted and Path(system.python).exists():
        return
    if not install:
        raise SystemExit(f"{system.name}: no venv at {system.venv} (run without --no-install)")
    spec = " ".join(system.requirements)
    print(f"installing {system.name} into {system.venv}: {spec}", flush=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--clear", str(system.venv)], check=True)
    pip = [system.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*pip, *system.requirements], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{system.name}: pip install failed:\n{done.stdout}\n{done.stderr}")
    stamp.write_text(wanted)


_VERSIONS_CODE = """
import importlib.metadata as m, json, platform, sys
out = {"python": platform.python_version()}
for dist in sys.argv[1:]:
    try:
        out[dist] = m.version(dist)
    except m.PackageNotFoundError:
        out[dist] = None
print(json.dumps(out))
"""


def versions(system: System) -> dict[str, str | None]:
    """Return the versions of the system's package, redis-py and hiredis in its venv."""
    dists = [system.dist, "redis", "hiredis"]
    out = subprocess.run(
        [system.python, "-c", _VERSIONS_CODE, *dists],
        capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=""),
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]
