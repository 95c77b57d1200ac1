"""Every worker option, declared once, and the frozen `WorkerConfig` built from them.

The table `OPTIONS` gives the defaults of `WorkerConfig`, the options of both command lines
(`qless-worker` and `manage.py qless_worker`) and the keys of `QLESS["WORKER"]` (with their
environment variables). A new option is a line in the table and, for a `WorkerConfig` field,
the field (whose default reads the table).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, NoReturn
from urllib.parse import urlsplit, urlunsplit

import redis

from django_qless.core.client import Client
from django_qless.core.registry import Middleware, Registry, default_registry
from django_qless.core.workers.reaper import LeaseReaper

if TYPE_CHECKING:
    from django_qless.core.workers.shards import Deployment

__all__ = ["OPTIONS", "RESERVERS", "OptionSpec", "WorkerConfig", "add_options",
           "default_of", "default_worker_name", "integer", "non_negative_int",
           "non_negative_number", "number", "option_values", "positive_number",
           "sanitize_name", "setting_keys", "shard_count", "url_list", "worker_name"]

Kind = Literal["int", "number", "choice", "flag", "no_flag", "append", "str", "queues", "urls"]
ReserverName = Literal["ordered", "round-robin", "shuffled"]
RESERVERS = ("ordered", "round-robin", "shuffled")

_INT_TEXT = re.compile(r"-?[0-9]+")
_NUM_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NAME_TEXT = re.compile(r"[\x21-\x39\x3b-\x7e]{1,128}")
_BAD_NAME_CHARS = re.compile(r"[^\x21-\x7e]|:")
_REAP_TIMEOUT = 5.0


def _refuse(text: str, need: str) -> NoReturn:
    raise argparse.ArgumentTypeError(f"must be {need}, got {text!r}")


def integer(text: str) -> int:
    """Parse a plain decimal integer (argparse type; no spaces, '_', '+' or floats)."""
    return int(text) if _INT_TEXT.fullmatch(text) else _refuse(text, "an integer")


def non_negative_int(text: str) -> int:
    """Parse an integer >= 0 (argparse type)."""
    value = integer(text)
    return value if value >= 0 else _refuse(text, "an integer >= 0")


def number(text: str) -> float:
    """Parse a finite decimal number (argparse type; no nan, inf, hex or spaces)."""
    if _NUM_TEXT.fullmatch(text) and math.isfinite(float(text)):
        return float(text)
    _refuse(text, "a finite number")


def non_negative_number(text: str) -> float:
    """Parse a finite number >= 0 (argparse type)."""
    value = number(text)
    return value if value >= 0 else _refuse(text, ">= 0")


def positive_number(text: str) -> float:
    """Parse a finite number > 0 (argparse type)."""
    value = number(text)
    return value if value > 0 else _refuse(text, "> 0")


def shard_count(text: str) -> int:
    """Parse a shard count the placement can use (argparse type)."""
    from django_qless.core.cluster.placement import MAX_SHARDS

    value = integer(text)
    return value if 1 <= value <= MAX_SHARDS else _refuse(text, f"in [1, {MAX_SHARDS}]")


def worker_name(text: str) -> str:
    """Parse a worker name: 1-128 printable ASCII characters, no space or ':'."""
    if _NAME_TEXT.fullmatch(text):
        return text
    _refuse(text[:140], "1-128 printable ASCII characters without ' ' or ':'")


def url_list(text: str) -> tuple[str, ...]:
    """Parse comma-separated Redis URLs (argparse type; each redis://, rediss:// or unix://)."""
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise argparse.ArgumentTypeError("give at least one node URL")
    if not all(url.startswith(("redis://", "rediss://", "unix://")) for url in urls):
        raise argparse.ArgumentTypeError(
            "each node URL must start with redis://, rediss:// or unix://")
    return urls


@dataclass(frozen=True)
class OptionSpec:
    """One worker option: its default, its command-line form and its setting."""

    name: str  # the WorkerConfig field (a settings-only option: its WorkerSettings field)
    default: Any
    help: str = ""
    flags: tuple[str, ...] = ()  # command-line flags; () keeps it off the command lines
    kind: Kind = "str"
    minimum: float | None = None  # command line: refuse values below this
    choices: tuple[str, ...] = ()
    dest: str | None = None  # the argparse dest, when it is not `name`
    metavar: str | None = None
    cli: Literal["both", "core", "none"] = "both"  # "core": qless-worker only
    setting: str | None = None  # the QLESS["WORKER"] key
    setting_minimum: float | None = None  # settings: smallest value accepted
    env: str | None = None  # read when the setting is absent
    parse: Any = None  # the command line's argparse type, when the kind's is not enough

    @property
    def key(self) -> str:
        """Return the argparse dest."""
        return self.dest or self.name


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("queues", ("default",), kind="queues", cli="none", setting="QUEUES",
               env="QLESS_WORKER_QUEUES"),
    OptionSpec("processes", None, "children to pre-fork (default: CPU count; 0: run jobs "
               "in-process)", ("-n", "--processes"), "int", 0, setting="PROCESSES",
               setting_minimum=1, env="QLESS_WORKER_PROCESSES"),
    OptionSpec("reserver", "ordered", "which queue to take from first", ("--reserver",),
               "choice", choices=RESERVERS, setting="RESERVER", env="QLESS_WORKER_RESERVER"),
    OptionSpec("max_jobs", 0, "run at most this many jobs, all children together, then exit",
               ("--max-jobs",), "int", 0, setting="MAX_JOBS", setting_minimum=1),
    OptionSpec("interval", 60.0, "idle safety re-check in seconds (wake-ups and due times "
               "arrive on pubsub)",
               ("--interval",), "number", setting="INTERVAL", setting_minimum=0,
               env="QLESS_WORKER_INTERVAL", parse=positive_number),
    OptionSpec("timeout", 0.0, "per-job time limit (seconds)", ("--timeout",), "number", 0,
               setting="TIMEOUT", setting_minimum=0.001, env="QLESS_WORKER_TIMEOUT"),
    OptionSpec("heartbeat", None, kind="int", cli="none", setting="HEARTBEAT",
               setting_minimum=1, env="QLESS_WORKER_HEARTBEAT"),
    OptionSpec("fork_per_job", False, "a fresh child for every job", ("--fork-per-job",),
               "flag"),
    OptionSpec("prefetch", True, "never hold a job ahead while short jobs run (see "
               "docs/worker.md)", ("--no-prefetch",), "no_flag", setting="PREFETCH",
               env="QLESS_WORKER_PREFETCH"),
    OptionSpec("leader_hold", 0.002, "seconds a child that takes a job as idle leader keeps "
               "leading if the job ends by then and no new work arrives (0: pass the lead "
               "at once)", ("--leader-hold",), "number", 0),
    OptionSpec("idle_disconnect", 10.0, "seconds the idle lead must stay with one child "
               "before the children waiting for it close their Redis connections until they "
               "lead, and seconds without a job before the supervisor closes its "
               "worker-channel connection until a child starts one (0: never)",
               ("--idle-disconnect",), "number", 0),
    OptionSpec("child_max_jobs", 0, "replace a child after this many jobs (0: never)",
               ("--child-max-jobs",), "int", 0),
    OptionSpec("import_modules", (), "import MODULE before forking (it registers jobs); "
               "repeatable", ("--import",), "append", dest="imports", metavar="MODULE"),
    OptionSpec("max_duration", 0.0, "stop after SECONDS", ("--max-duration",), "number", 0),
    OptionSpec("resume", False, "first run the jobs this worker name still holds (use with "
               "--name)", ("--resume",), "flag"),
    OptionSpec("dry_run", False, "check setup, take no job", ("--dry-run",), "flag"),
    OptionSpec("print_options", False, "print options and exit", ("--print-options",), "flag"),
    OptionSpec("exec_command", (), "run COMMAND per job: data JSON on stdin, jid as last "
               "argument", ("--exec",), "str", metavar="COMMAND"),
    OptionSpec("kill_grace", 5.0, "seconds between TERM and KILL for a job over its limit",
               ("--kill-grace",), "number", 0),
    # 15 + --shutdown-grace 10 fits Kubernetes' default 30 s termination grace period.
    OptionSpec("term_grace", 15.0, "seconds TERM/INT lets running jobs finish before giving "
               "them back to waiting (0: give them back at once)", ("--term-grace",),
               "number", 0, setting="TERM_GRACE", setting_minimum=0,
               env="QLESS_WORKER_TERM_GRACE"),
    OptionSpec("shutdown_grace", 10.0, "seconds children get to give their jobs back before "
               "they are killed", ("--shutdown-grace",), "number", 0),
    OptionSpec("reap_interval", None, "seconds between lease reaper runs (default: from the "
               "heartbeat and grace-period config; 0 = off)", ("--reap-interval",), "number", 0),
    OptionSpec("beat", 60.0, "seconds within which a live worker tells Redis so, idle or busy "
               "(the dashboard shows it stale after 1.5 beats, dead after 3)", ("--beat",),
               "number", 1),
    OptionSpec("start_timeout", 30.0, "seconds to wait for Redis at start, then exit 1 "
               "(default 30; 0: no wait)", ("--start-timeout",), "number", 0,
               setting="START_TIMEOUT", setting_minimum=0, env="QLESS_WORKER_START_TIMEOUT"),
    OptionSpec("health_file", None, "rewrite PATH every few seconds with the worker's state "
               "and the time, for liveness/readiness probes (python -m django_qless.core.probe "
               "PATH)", ("--health-file",), metavar="PATH", setting="HEALTH_FILE",
               env="QLESS_WORKER_HEALTH_FILE"),
    OptionSpec("name", None, "worker name (default host-pid)", ("--name",), parse=worker_name),
    # The Django command takes the connection (one server or a cluster) from its alias.
    OptionSpec("cluster", (), "serve queues placed over the shards of the Redis Cluster with "
               "these nodes (comma-separated URLs) instead of --url", ("--cluster",), "urls",
               cli="core", metavar="URLS"),
    OptionSpec("shards", 16, "with --cluster: the number of shards queues are placed over",
               ("--shards",), "int", 1, cli="core", parse=shard_count),
    OptionSpec("sandbox_root", None, "parent of per-worker sandboxes", ("--sandbox-root",)),
)


def default_of(name: str) -> Any:
    """Return the declared default of option `name` (for the WorkerConfig field)."""
    return next(spec.default for spec in OPTIONS if spec.name == name)


def setting_keys() -> frozenset[str]:
    """Return the keys QLESS["WORKER"] accepts."""
    return frozenset(spec.setting for spec in OPTIONS if spec.setting)


def _on_command_line(spec: OptionSpec, django: bool) -> bool:
    return spec.cli == "both" or (spec.cli == "core" and not django)


def add_options(parser: argparse.ArgumentParser, *, django: bool = False,
                aliases: Mapping[str, Iterable[str]] | None = None) -> None:
    """Add every command-line worker option to `parser` (not given: None, flags False).

    `option_values` drops what was not given, so a caller can fill it from settings;
    `aliases` adds flags to an option.
    """
    types: dict[str, Any] = {"int": (integer, non_negative_int), "urls": (url_list, url_list),
                             "number": (number, non_negative_number)}
    for spec in (s for s in OPTIONS if _on_command_line(s, django)):
        flags = (*(aliases or {}).get(spec.name, ()), *spec.flags)
        if spec.kind in ("flag", "no_flag"):
            parser.add_argument(*flags, dest=spec.key, help=spec.help,
                                action="store_true" if spec.kind == "flag" else "store_false",
                                default=False if spec.kind == "flag" else None)
        elif spec.kind == "append":
            parser.add_argument(*flags, dest=spec.key, action="append", default=[],
                                metavar=spec.metavar, help=spec.help)
        elif spec.kind == "choice":
            parser.add_argument(*flags, dest=spec.key, choices=spec.choices, default=None)
        else:
            kind_type: Any = types[spec.kind][spec.minimum == 0] if spec.kind in types else None
            parser.add_argument(*flags, dest=spec.key, type=spec.parse or kind_type,
                                default=None, metavar=spec.metavar, help=spec.help)


def option_values(given: Mapping[str, Any], *, django: bool = False) -> dict[str, Any]:
    """Return the WorkerConfig arguments among parsed options (not given: left out)."""
    values: dict[str, Any] = {}
    for spec in (s for s in OPTIONS if _on_command_line(s, django)):
        value = given.get(spec.key)
        if value is not None and not (spec.kind == "append" and not value):
            values[spec.name] = tuple(value) if spec.kind == "append" else value
    return values


def sanitize_name(text: str) -> str:
    """Make `text` a valid worker name (printable ASCII, no space or ':', at most 128 chars)."""
    return _BAD_NAME_CHARS.sub("_", text)[:128] or "worker"


def default_worker_name(pid: int | None = None) -> str:
    """Return `host-pid` for this process (the default worker name)."""
    host = sanitize_name(socket.gethostname().split(".")[0] or "localhost")
    return sanitize_name(f"{host[:100]}-{os.getpid() if pid is None else pid}")


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs to know; build it once, hand it to `make_worker`."""

    url: str = "redis://localhost:6379/0"
    queues: tuple[str, ...] = ()
    processes: int | None = default_of("processes")  # None: CPU count; 0: SerialWorker
    reserver: ReserverName = default_of("reserver")
    fork_per_job: bool = default_of("fork_per_job")
    prefetch: bool = default_of("prefetch")  # hold the next job ahead (hand.py)
    child_max_jobs: int = default_of("child_max_jobs")
    import_modules: tuple[str, ...] = default_of("import_modules")
    max_jobs: int = default_of("max_jobs")
    max_duration: float = default_of("max_duration")
    interval: float = default_of("interval")
    resume: bool = default_of("resume")
    dry_run: bool = default_of("dry_run")
    print_options: bool = default_of("print_options")
    exec_command: tuple[str, ...] = default_of("exec_command")
    timeout: float = default_of("timeout")
    kill_grace: float = default_of("kill_grace")
    leader_hold: float = default_of("leader_hold")  # leadership.py
    idle_disconnect: float = default_of("idle_disconnect")  # loop.py, channels.py
    term_grace: float = default_of("term_grace")
    shutdown_grace: float = default_of("shutdown_grace")
    name: str | None = default_of("name")
    cluster: tuple[str, ...] = default_of("cluster")
    shards: int = default_of("shards")
    verbosity: int = 0
    sandbox_root: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "qless"))
    # Glob queue patterns are re-resolved against the known queues this often.
    queue_refresh: float = 10.0
    # A child dying sooner than this after its start counts toward the respawn back-off.
    respawn_min_uptime: float = 1.0
    respawn_max_backoff: float = 30.0
    # None: half of the engine's min(heartbeat, grace-period), 1-30 s. Supervisor/serial only.
    reap_interval: float | None = default_of("reap_interval")
    beat: float = default_of("beat")  # rides on the reaper's call
    start_timeout: float = default_of("start_timeout")
    health_file: str | None = default_of("health_file")  # core/probe.py
    # A half-open TCP connection must not block a worker forever (None: block).
    socket_timeout: float | None = 30.0
    # The queue of each registered job kind, where a framework knows it: the start line
    # names those not served.
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
        queues = (self.queues,) if isinstance(self.queues, str) else self.queues
        cluster = self.cluster.split(",") if isinstance(self.cluster, str) else self.cluster
        words = " ".join(map(str, queues)).replace(",", " ").split()
        object.__setattr__(self, "queues", tuple(dict.fromkeys(words)))
        object.__setattr__(self, "cluster", tuple(u.strip() for u in cluster if u.strip()))
        for name in ("import_modules", "exec_command", "middleware"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        """Raise ValueError if an option is out of range."""
        if self.reserver not in RESERVERS:
            raise ValueError(f"reserver must be one of {', '.join(RESERVERS)}: {self.reserver!r}")
        if self.processes is not None and self.processes < 0:
            raise ValueError(f"processes must be >= 0: {self.processes}")
        for name in ("max_jobs", "child_max_jobs", "max_duration", "timeout", "kill_grace",
                     "term_grace", "shutdown_grace", "start_timeout", "leader_hold",
                     "idle_disconnect"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.reap_interval is not None and not self.reap_interval >= 0:
            raise ValueError(f"reap_interval must be >= 0: {self.reap_interval}")
        if not 1 <= self.beat <= 86400:
            raise ValueError(f"beat must be >= 1 and <= 86400: {self.beat}")
        if self.shards != default_of("shards"):
            from django_qless.core.cluster.placement import MAX_SHARDS  # (only when set)

            if not 1 <= self.shards <= MAX_SHARDS:
                raise ValueError(f"shards must be in [1, {MAX_SHARDS}]: {self.shards}")
        if not self.interval > 0:
            raise ValueError(f"interval must be > 0: {self.interval}")
        if self.name is not None and sanitize_name(self.name) != self.name:
            raise ValueError(
                f"worker name must be printable ASCII without ' ' or ':': {self.name!r}")

    @property
    def serial(self) -> bool:
        """Tell whether jobs run in this process (no children)."""
        return self.processes == 0

    @property
    def process_count(self) -> int:
        """Return the number of children to keep (CPU count by default)."""
        return (os.cpu_count() or 1) if self.processes is None else self.processes

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
        """Return a new Client, or a ShardedClient with `cluster` (socket_timeout -1: ours)."""
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
        """Return the lease reaper of a supervisor or serial worker (reap_interval 0: beats)."""
        # Its own connection with a short timeout: a silent Redis must not stall the caller.
        return LeaseReaper(
            lambda: self.make_client(worker_name=worker_name, socket_timeout=_REAP_TIMEOUT),
            period=self.reap_interval or None, reaps=self.reap_interval != 0,
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the options as plain data (for --print-options)."""
        hidden = ("middleware", "registry", "connect", "job_queues")
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in hidden}
        data.update(url=self.safe_url, cluster=[_masked(url) for url in self.cluster],
                    processes=self.process_count,
                    middleware=[getattr(m, "__qualname__", repr(m)) for m in self.middleware])
        return data


def _masked(url: str) -> str:
    """Return `url` with any password (user part, or `password=` in the query) masked."""
    base, mark, query = url.partition("?")
    parts = urlsplit(base)
    if parts.password is not None:
        user, host = parts.username or "", parts.hostname or ""
        netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
        base = urlunsplit(parts._replace(netloc=netloc))
    return base + mark + re.sub(r"(?i)((?:^|&)password=)[^&]*", r"\1***", query)
