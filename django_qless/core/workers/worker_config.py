"""The worker's options, as one frozen dataclass; defaults are declared in option_specs.py."""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis

from django_qless.core.client import Client
from django_qless.core.registry import Middleware, Registry, default_registry
from django_qless.core.workers.option_specs import RESERVERS, default_of
from django_qless.core.workers.reaper import LeaseReaper

if TYPE_CHECKING:
    from django_qless.core.workers.shards import Deployment

__all__ = ["RESERVERS", "WorkerConfig", "default_worker_name", "sanitize_name"]

ReserverName = Literal["ordered", "round-robin", "shuffled"]

_REAP_TIMEOUT = 5.0
_BAD_NAME_CHARS = re.compile(r"[^\x21-\x7e]|:")


def sanitize_name(text: str) -> str:
    """Make `text` a valid worker name (printable ASCII, no space or ':', at most 128 chars)."""
    clean = _BAD_NAME_CHARS.sub("_", text)[:128]
    return clean or "worker"


def default_worker_name(pid: int | None = None) -> str:
    """Return `host-pid` for this process (the default worker name)."""
    host = sanitize_name(socket.gethostname().split(".")[0] or "localhost")
    return sanitize_name(f"{host[:100]}-{os.getpid() if pid is None else pid}")


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs to know; build it once, hand it to `make_worker`."""

    url: str = "redis://localhost:6379/0"
    queues: tuple[str, ...] = ()
    # None: one child per CPU; 0: no children, run jobs in this process (SerialWorker).
    processes: int | None = default_of("processes")
    reserver: ReserverName = default_of("reserver")
    fork_per_job: bool = default_of("fork_per_job")
    # While jobs finish within a few ms, hold the next job ahead and send each completion
    # without waiting for its reply (see hand.py); False: one job at a time.
    prefetch: bool = default_of("prefetch")
    # Recycle a child after this many jobs (0: never); fork_per_job means 1.
    child_max_jobs: int = default_of("child_max_jobs")
    import_modules: tuple[str, ...] = default_of("import_modules")
    # Stop (gracefully) after this many jobs / seconds; 0 means no limit.
    max_jobs: int = default_of("max_jobs")
    max_duration: float = default_of("max_duration")
    # Safety re-check while idle; wake-ups normally arrive first (wake:<queue> channels).
    interval: float = default_of("interval")
    resume: bool = default_of("resume")
    dry_run: bool = default_of("dry_run")
    print_options: bool = default_of("print_options")
    exec_command: tuple[str, ...] = default_of("exec_command")
    # Per-job time limit in seconds (0: none); then SIGTERM, then SIGKILL after kill_grace.
    timeout: float = default_of("timeout")
    kill_grace: float = default_of("kill_grace")
    # How long an idle leader that takes a job keeps the token (leadership.py).
    leader_hold: float = default_of("leader_hold")
    # How long that token stays with one child before the children waiting for it close
    # their connections (taking.py), and how long the supervisor goes without a job before
    # it closes its worker channels' connection (supervision.py).
    idle_disconnect: float = default_of("idle_disconnect")
    # How long TERM/INT lets running jobs finish before giving them back (0: at once).
    term_grace: float = default_of("term_grace")
    # How long children get to give their jobs back before SIGKILL.
    shutdown_grace: float = default_of("shutdown_grace")
    name: str | None = default_of("name")
    # Queues placed over the shards of a Redis Cluster with these nodes (instead of `url`).
    cluster: tuple[str, ...] = default_of("cluster")
    shards: int = default_of("shards")
    verbosity: int = 0
    sandbox_root: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "qless"))
    # Glob queue patterns are re-resolved against the known queues this often.
    queue_refresh: float = 10.0
    # A child dying sooner than this after its start counts toward the respawn back-off.
    respawn_min_uptime: float = 1.0
    respawn_max_backoff: float = 30.0
    # Recover expired leases on every known queue this often, in seconds (None: half of the
    # engine's min(heartbeat, grace-period), 1-30 s; 0: never). Supervisor/serial worker only.
    reap_interval: float | None = default_of("reap_interval")
    # Seconds within which the worker tells Redis it is alive (its beat rides on the reaper's
    # call): the dashboard shows it stale after 1.5 beats, dead after 3.
    beat: float = default_of("beat")
    # How long to wait for Redis at start before giving up with exit code 1 (0: no wait).
    start_timeout: float = default_of("start_timeout")
    # A file the serial worker or the supervisor keeps fresh with its state (core/probe.py).
    health_file: str | None = default_of("health_file")
    # Redis socket timeout for worker connections: a half-open TCP connection must not
    # block a worker forever (None: block).
    socket_timeout: float | None = 30.0
    # The queue each registered job kind is put in, where a framework knows it (the Django
    # command passes its @job and django.tasks kinds): the start line names those not served.
    job_queues: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    middleware: tuple[Middleware, ...] = field(default=(), compare=False)
    registry: Registry = field(default=default_registry, compare=False, repr=False)
    # Build the connection yourself (Sentinel, client certificates, a cluster, ...) instead
    # of from `url`: called in every process that needs one, after fork; returns a
    # redis.Redis with decode_responses=True, a core Client, or a ShardedClient. Socket
    # timeouts are then the factory's.
    connect: Callable[[], redis.Redis | Deployment] | None = field(
        default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.queues, str):
            object.__setattr__(self, "queues", (self.queues,))
        object.__setattr__(self, "queues", tuple(_split_queues(self.queues)))
        object.__setattr__(self, "import_modules", tuple(self.import_modules))
        object.__setattr__(self, "exec_command", tuple(self.exec_command))
        object.__setattr__(self, "middleware", tuple(self.middleware))
        if isinstance(self.cluster, str):
            object.__setattr__(self, "cluster", tuple(self.cluster.split(",")))
        object.__setattr__(self, "cluster", tuple(u.strip() for u in self.cluster if u.strip()))
        self.validate()

    def validate(self) -> None:
        """Raise ValueError if an option is out of range."""
        if self.reserver not in RESERVERS:
            raise ValueError(f"reserver must be one of {', '.join(RESERVERS)}: {self.reserver!r}")
        if self.processes is not None and self.processes < 0:
            raise ValueError(f"processes must be >= 0: {self.processes}")
        for name in ("max_jobs", "child_max_jobs"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.reap_interval is not None and not self.reap_interval >= 0:
            raise ValueError(f"reap_interval must be >= 0: {self.reap_interval}")
        if not 1 <= self.beat <= 86400:
            raise ValueError(f"beat must be >= 1 and <= 86400: {self.beat}")
        for name in ("max_duration", "timeout", "kill_grace", "term_grace", "shutdown_grace",
                     "start_timeout", "leader_hold", "idle_disconnect"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.shards != default_of("shards"):
            self._check_shards()
        if not self.interval > 0:
            raise ValueError(f"interval must be > 0: {self.interval}")
        if self.name is not None and sanitize_name(self.name) != self.name:
            raise ValueError(
                f"worker name must be printable ASCII without ' ' or ':': {self.name!r}"
            )

    def _check_shards(self) -> None:
        """Refuse a shard count the placement cannot use (imported only when one is set)."""
        from django_qless.core.cluster.placement import MAX_SHARDS

        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be in [1, {MAX_SHARDS}]: {self.shards}")

    @property
    def serial(self) -> bool:
        """Tell whether jobs run in this process (no children)."""
        return self.processes == 0

    @property
    def process_count(self) -> int:
        """Return the number of children to keep (CPU count by default)."""
        if self.processes is None:
            return os.cpu_count() or 1
        return self.processes

    @property
    def jobs_per_child(self) -> int:
        """Return how many jobs a child runs before it is replaced (0: unlimited)."""
        return 1 if self.fork_per_job else self.child_max_jobs

    @property
    def safe_url(self) -> str:
        """Return the URL with any password masked (for logs and --print-options)."""
        if self.connect is not None:
            return "(custom connection)"
        if self.cluster:
            return "cluster " + ",".join(_masked(url) for url in self.cluster)
        return _masked(self.url)

    def make_client(
        self, *, worker_name: str | None = None, socket_timeout: float | None = -1.0
    ) -> Deployment:
        """Return a new client for this process: a Client, or a ShardedClient with `cluster`
        (socket_timeout -1: the config's)."""
        if self.connect is not None:
            made = self.connect()
            if isinstance(made, Client):
                return made
            if not isinstance(made, redis.Redis):  # (only a cluster's factory gets here)
                from django_qless.core.cluster.sharded import ShardedClient

                if isinstance(made, ShardedClient):
                    return made
            return Client(made, worker_name=worker_name)
        timeout = self.socket_timeout if socket_timeout == -1.0 else socket_timeout
        if self.cluster:
            from django_qless.core.cluster.sharded import ShardedClient

            return ShardedClient(list(self.cluster), shards=self.shards,
                                 worker_name=worker_name, socket_timeout=timeout)
        return Client(self.url, worker_name=worker_name, socket_timeout=timeout)

    def make_reaper(self, worker_name: str) -> LeaseReaper:
        """Return the periodic lease reaper for a supervisor or serial worker (with
        `reap_interval` 0 it only carries the worker's beats)."""
        # Its own connection with a short timeout: a silent Redis must not stall the caller.
        return LeaseReaper(
            lambda: self.make_client(worker_name=worker_name, socket_timeout=_REAP_TIMEOUT),
            period=self.reap_interval or None, reaps=self.reap_interval != 0,
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the options as plain data (for --print-options)."""
        data = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("middleware", "registry", "connect", "job_queues")
        }
        data["url"] = self.safe_url
        data["cluster"] = [_masked(url) for url in self.cluster]
        data["processes"] = self.process_count
        data["middleware"] = [getattr(m, "__qualname__", repr(m)) for m in self.middleware]
        return data


def _split_queues(values: tuple[str, ...]) -> list[str]:
    """Accept `a,b c` style queue lists; keep order, drop duplicates."""
    seen: list[str] = []
    for value in values:
        for part in str(value).replace(",", " ").split():
            if part not in seen:
                seen.append(part)
    return seen


def _masked(url: str) -> str:
    """Return `url` with any password (user part, or `password=` in the query) masked."""
    base, mark, query = url.partition("?")
    parts = urlsplit(base)
    if parts.password is not None:
        user, host = parts.username or "", parts.hostname or ""
        netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
        base = urlunsplit(parts._replace(netloc=netloc))
    return base + mark + re.sub(r"(?i)((?:^|&)password=)[^&]*", r"\1***", query)
