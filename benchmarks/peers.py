"""The systems under test: where each one's Python lives, installing the peers' venvs, and
running one system's adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

__all__ = ["OURS", "SYSTEMS", "System", "checkout", "ensure_venv", "package_dirs", "run_adapter",
           "versions"]

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
OURS = "django-qless"


@dataclass(frozen=True)
class System:
    """One measured system: its adapter script and its pinned requirements (peers only)."""

    name: str
    adapter: str
    requirements: tuple[str, ...] = ()
    dist: str = ""  # distribution whose version is reported
    tree: Path | None = None  # another checkout of this project, run from its own files

    @property
    def is_peer(self) -> bool:
        """Return whether this system lives in its own venv under benchmarks/.venvs."""
        return bool(self.requirements)

    @property
    def is_ours(self) -> bool:
        """Return whether this system is django-qless (this tree or another checkout)."""
        return self.name == OURS or self.tree is not None

    @property
    def adapters(self) -> Path:
        """Return the folder holding this system's adapter and its helpers."""
        return HERE / "adapters" if self.tree is None else self.tree / "benchmarks" / "adapters"

    def env(self) -> dict[str, str]:
        """Return the environment its adapter runs in: a checkout's package comes first."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        return env

    @property
    def venv(self) -> Path:
        """Return the venv directory of a peer."""
        return VENVS / self.name

    @property
    def python(self) -> str:
        """Return the interpreter that runs this system's adapter."""
        if self.tree is not None:
            return str(self.tree / ".venv" / "bin" / "python")
        if not self.is_peer:
            return sys.executable  # django-qless: the project's own .venv
        return str(self.venv / "bin" / "python")


SYSTEMS = {
    s.name: s
    for s in (
        System(OURS, "django_qless_.py", dist="django-qless"),
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


_WHERE_CODE = "import django_qless, os; print(os.path.dirname(django_qless.__file__))"


def package_dirs(system: System) -> dict[str, str]:
    """Return where the adapter and the worker it starts import `django_qless` from."""
    out = {}
    # The worker an adapter starts may see only the adapters folder on PYTHONPATH (older
    # trees set just that), so its package must come from the tree's own venv.
    sights = {"adapter": system.env(),
              "worker": dict(system.env(), PYTHONPATH=str(system.adapters))}
    for who, env in sights.items():
        done = subprocess.run([system.python, "-c", _WHERE_CODE], env=env,
                              cwd=tempfile.gettempdir(), capture_output=True, text=True,
                              check=False)
        out[who] = done.stdout.strip() or f"(import failed: {done.stderr.strip()[-300:]})"
    return out


def checkout(path: str | Path, name: str = "old", *, install: bool = True) -> System:
    """Return another checkout of this project as a system run from its own files.

    Its adapter runs with that tree's `.venv` (created with its Makefile when missing) and
    that tree first on PYTHONPATH; refuse it when the adapter or its worker would import
    `django_qless` from anywhere else.
    """
    tree = Path(path).resolve()
    if not (tree / "django_qless").is_dir() or not (tree / "benchmarks" / "adapters").is_dir():
        raise SystemExit(f"{tree} is not a checkout of django-qless (no django_qless/ or "
                         "benchmarks/adapters/)")
    system = replace(SYSTEMS[OURS], name=name, tree=tree)
    if not Path(system.python).exists():
        if not install:
            raise SystemExit(f"{tree} has no .venv (run `make .venv/.installed-stamp` there)")
        print(f"creating {tree / '.venv'} with its Makefile", flush=True)
        subprocess.run(["make", "-C", str(tree), ".venv/.installed-stamp"], check=True)
    wanted = str(tree / "django_qless")
    dirs = package_dirs(system)
    wrong = {who: where for who, where in dirs.items() if where != wanted}
    if wrong:
        raise SystemExit(f"{tree}: django_qless would not come from {wanted}: {wrong}")
    return system


def run_adapter(system: System, url: str, metrics: str, s: dict[str, Any],
                idle_children: str = "1") -> dict[str, Any]:
    """Run one system's adapter in its own interpreter on a flushed Redis; return its JSON."""
    import redis

    redis.Redis.from_url(url).flushall()
    argv = [
        system.python, str(system.adapters / system.adapter), "--url", url,
        "--metrics", metrics, "--enqueue-n", str(s["enqueue"]), "--drain-n", str(s["drain"]),
        "--worker-n", str(s["worker"]), "--latency-n", str(s["latency"]),
        "--scale-sizes", s["scale"], "--scale-probe", str(s["probe"]),
        "--scale-queues", str(s["scale_queues"]), "--body", s["body"],
        "--idle-children", idle_children,
        "--idle-seconds", str(s["idle_seconds"]), "--idle-monitor", str(s["idle_monitor"]),
        "--idle-samples", str(s["idle_samples"]),
    ]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=system.adapters, env=system.env(), capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{system.name} adapter failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}\n{done.stdout[-1000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = round(time.monotonic() - started, 1)
    return result
