"""Every worker option, declared once, and the frozen `WorkerConfig` built from them.

`OPTIONS` gives each option's default, how its value is read and checked, its flags on both
command lines (`qless-worker`, `manage.py qless_worker`) and its `QLESS["WORKER"]` key.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import shlex
import socket
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

import redis

from django_qless.core.client import Client
from django_qless.core.registry import Middleware, Registry, default_registry

if TYPE_CHECKING:
    from django_qless.core.types import QlessClient
    from django_qless.core.upkeep import LeaseReaper

__all__ = ["OPTIONS", "RESERVERS", "OptionSpec", "WorkerConfig", "add_options",
           "default_worker_name", "integer", "non_negative_int", "number", "option",
           "option_values", "parse_number", "sanitize_name", "setting_keys"]

Kind = Literal["int", "number", "choice", "flag", "no_flag", "append", "str", "queues", "urls"]
ReserverName = Literal["ordered", "round-robin", "shuffled"]
RESERVERS = ("ordered", "round-robin", "shuffled")
Bound = float | Callable[[], float] | None

_TEXT = {"int": re.compile(r"-?[0-9]+"),
         "number": re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")}
_NAME_TEXT = re.compile(r"[\x21-\x39\x3b-\x7e]{1,128}")
_BAD_NAME_CHARS = re.compile(r"[^\x21-\x7e]|:")
_REAP_TIMEOUT = 5.0


def _refuse(need: str, text: object) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {need}, got {str(text)[:140]!r}")


def _out_of_bounds(value: float, kind: str, low: float | None, high: Bound,
                   above: bool) -> str | None:
    """Return what `value` must be when it is outside the bounds (None: inside)."""
    top = high() if callable(high) else high
    if top is not None and low is not None:
        return None if low <= value <= top else f"in [{low:g}, {top:g}]"
    if low is None or value > low or (value == low and not above):
        return None
    need = f"{'>' if above else '>='} {low:g}"
    return f"an integer {need}" if kind == "int" else need


def parse_number(text: str, kind: str = "number", low: float | None = None,
                 high: Bound = None, above: bool = False) -> Any:
    """Parse a plain decimal in bounds (argparse type; no spaces, '_', '+', hex, nan or inf)."""
    if not _TEXT[kind].fullmatch(text) or (kind == "number" and not math.isfinite(float(text))):
        raise _refuse("an integer" if kind == "int" else "a finite number", text)
    value = int(text) if kind == "int" else float(text)
    need = _out_of_bounds(value, kind, low, high, above)
    if need:
        raise _refuse(need, text)
    return value


integer = partial(parse_number, kind="int")
non_negative_int = partial(parse_number, kind="int", low=0)
number = partial(parse_number, kind="number")


def _max_shards() -> float:
    from django_qless.core.cluster.placement import MAX_SHARDS  # (only a cluster needs it)

    return MAX_SHARDS


def _worker_name(text: str) -> str:
    if not _NAME_TEXT.fullmatch(text):
        raise _refuse("1-128 printable ASCII characters without ' ' or ':'", text)
    return text


def _url_list(text: str) -> tuple[str, ...]:
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise argparse.ArgumentTypeError("give at least one node URL")
    if not all(url.startswith(("redis://", "rediss://", "unix://")) for url in urls):
        raise argparse.ArgumentTypeError(
            "each node URL must start with redis://, rediss:// or unix://")
    return urls


def _command(text: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot parse {text[:80]!r}: {exc}") from None
    if text and not words:
        raise argparse.ArgumentTypeError("the command is empty")
    return words


def _module(name: str) -> str:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise argparse.ArgumentTypeError(f"no module named {name!r}")
    return name


def _writable(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path or "."))
    if path and not (os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK)):
        raise argparse.ArgumentTypeError(f"cannot write in {directory!r}")
    return path


@dataclass(frozen=True)
class OptionSpec:
    """One worker option: its default, its check, its command-line form and its setting."""

    name: str  # the WorkerConfig field (a settings-only option: its WorkerSettings field)
    default: Any
    help: str = ""
    flags: tuple[str, ...] = ()  # command-line flags; () keeps it off the command lines
    kind: Kind = "str"
    minimum: float | None = None  # "int"/"number": the smallest value accepted
    maximum: Bound = None  # with `minimum`: the largest (a callable: looked up when needed)
    above: bool = False  # `minimum` itself is refused
    choices: tuple[str, ...] = ()
    dest: str | None = None  # the argparse dest, when it is not `name`
    metavar: str | None = None
    cli: Literal["both", "core", "none"] = "both"  # "core": qless-worker only
    setting: str | None = None  # the QLESS["WORKER"] key
    setting_minimum: float | None = None  # settings: smallest value accepted
    env: str | None = None  # read when the setting is absent
    parse: Callable[[str], Any] | None = None  # reads a "str", "append" or "urls" value

    @property
    def key(self) -> str:
        """Return the argparse dest."""
        return self.dest or self.name

    def read(self, text: str) -> Any:
        """Read this option's command-line text, or refuse it saying why (argparse type)."""
        if self.kind in ("int", "number"):
            return parse_number(text, self.kind, self.minimum, self.maximum, self.above)
        return self.parse(text) if self.parse else text

    def check(self, value: Any) -> None:
        """Raise ValueError naming this option when its declaration refuses `value`."""
        try:
            if self.kind in ("int", "number"):
                need = _out_of_bounds(value, self.kind, self.minimum, self.maximum, self.above)
                if need:
                    raise _refuse(need, value)
            elif self.kind == "choice" and value not in self.choices:
                raise _refuse(f"one of {', '.join(self.choices)}", value)
            elif self.parse and isinstance(value, str):
                self.parse(value)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"{self.name}: {exc}") from None

    def argument(self) -> dict[str, Any]:
        """Return the argparse keywords of this option besides its flags."""
        common = {"dest": self.key, "help": self.help}
        if self.kind in ("flag", "no_flag"):
            flag = self.kind == "flag"  # (not given: False for a flag, None for a "no_" one)
            return {**common, "action": f"store_{flag}".lower(), "default": False if flag else None}
        if self.kind == "choice":
            return {**common, "choices": self.choices, "default": None}
        action = {"action": "append", "default": []} if self.kind == "append" else {}
        return {"default": None, **common, **action, "type": self.read, "metavar": self.metavar}


def setting_keys() -> frozenset[str]:
    """Return the keys QLESS["WORKER"] accepts."""
    return frozenset(spec.setting for spec in OPTIONS if spec.setting)


def _command_line(django: bool) -> list[OptionSpec]:
    return [s for s in OPTIONS if s.cli == "both" or (s.cli == "core" and not django)]


def add_options(parser: argparse.ArgumentParser, *, django: bool = False,
                aliases: Mapping[str, Iterable[str]] | None = None) -> None:
    """Add every command-line worker option to `parser`; `aliases` adds flags to options."""
    for spec in _command_line(django):
        parser.add_argument(*(aliases or {}).get(spec.name, ()), *spec.flags, **spec.argument())


def option_values(given: Mapping[str, Any], *, django: bool = False) -> dict[str, Any]:
    """Return the WorkerConfig arguments among parsed options (not given: left out)."""
    values = {spec.name: given.get(spec.key) for spec in _command_line(django)}
    return {name: tuple(value) if isinstance(value, list) else value
            for name, value in values.items()
            if value not in (None, []) and name in WorkerConfig.__dataclass_fields__}


def sanitize_name(text: str) -> str:
    """Make `text` a valid worker name (printable ASCII, no space or ':', at most 128 chars)."""
    return _BAD_NAME_CHARS.sub("_", text)[:128] or "worker"


def default_worker_name(pid: int | None = None) -> str:
    """Return `host-pid` for this process (the default worker name)."""
    host = sanitize_name(socket.gethostname().split(".")[0] or "localhost")
    return sanitize_name(f"{host[:100]}-{os.getpid() if pid is None else pid}")


def option(default: Any, *args: Any, **kwargs: Any) -> Any:
    """Declare a WorkerConfig field an option: `OptionSpec`'s arguments after its name."""
    return field(default=default, metadata={"option": OptionSpec("", default, *args, **kwargs)})


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs to know; build it once, hand it to `make_worker`."""

    url: str = "redis://localhost:6379/0"
    queues: tuple[str, ...] = ()
    processes: int | None = option(  # None: CPU count; 0: SerialWorker
        None, "children to pre-fork (default: CPU count; 0: run jobs in-process)",
        ("-n", "--processes"), "int", 0, setting="PROCESSES", setting_minimum=1,
        env="QLESS_WORKER_PROCESSES")
    reserver: ReserverName = option(
        "ordered", "which queue to take from first", ("--reserver",), "choice",
        choices=RESERVERS, setting="RESERVER", env="QLESS_WORKER_RESERVER")
    fork_per_job: bool = option(False, "a fresh child for every job", ("--fork-per-job",),
                                "flag")
    prefetch: bool = option(
        True, "never hold a job ahead while short jobs run (see docs/worker.md)",
        ("--no-prefetch",), "no_flag", setting="PREFETCH", env="QLESS_WORKER_PREFETCH")
    child_max_jobs: int = option(0, "replace a child after this many jobs (0: never)",
                                 ("--child-max-jobs",), "int", 0)
    import_modules: tuple[str, ...] = option(
        (), "import MODULE before forking (it registers jobs); repeatable", ("--import",),
        "append", dest="imports", metavar="MODULE", parse=_module)
    max_jobs: int = option(
        0, "run at most this many jobs, all children together, then exit", ("--max-jobs",),
        "int", 0, setting="MAX_JOBS", setting_minimum=1)
    max_duration: float = option(0.0, "stop after SECONDS", ("--max-duration",), "number", 0)
    interval: float = option(
        60.0, "idle safety re-check in seconds (wake-ups and due times arrive on pubsub)",
        ("--interval",), "number", 0, above=True, setting="INTERVAL", setting_minimum=0,
        env="QLESS_WORKER_INTERVAL")
    resume: bool = option(False, "first run the jobs this worker name still holds",
                          ("--resume",), "flag")
    dry_run: bool = option(False, "check setup, take no job", ("--dry-run",), "flag")
    print_options: bool = option(False, "print options and exit", ("--print-options",), "flag")
    exec_command: tuple[str, ...] = option(
        (), "run COMMAND per job: data JSON on stdin, jid as last argument", ("--exec",),
        metavar="COMMAND", parse=_command)
    timeout: float = option(0.0, "per-job time limit (seconds)", ("--timeout",), "number", 0,
                            setting="TIMEOUT", setting_minimum=0.001, env="QLESS_WORKER_TIMEOUT")
    kill_grace: float = option(5.0, "seconds between TERM and KILL for a job over its limit",
                               ("--kill-grace",), "number", 0)
    leader_hold: float = option(
        0.002, "seconds an idle leader that takes a job keeps the lead for it to end (0: pass "
        "it at once)", ("--leader-hold",), "number", 0)
    idle_disconnect: float = option(
        10.0, "idle seconds before waiting children and the supervisor close Redis "
        "connections they do not need (0: never)", ("--idle-disconnect",), "number", 0)
    # 15 + --shutdown-grace 10 fits Kubernetes' default 30 s termination grace period.
    term_grace: float = option(
        15.0, "seconds TERM/INT lets running jobs finish before giving them back to waiting "
        "(0: give them back at once)", ("--term-grace",), "number", 0, setting="TERM_GRACE",
        setting_minimum=0, env="QLESS_WORKER_TERM_GRACE")
    shutdown_grace: float = option(
        10.0, "seconds children get to give their jobs back before they are killed",
        ("--shutdown-grace",), "number", 0)
    name: str | None = option(None, "worker name (default host-pid)", ("--name",),
                              parse=_worker_name)
    # The Django command takes the connection (one server or a cluster) from its alias.
    cluster: tuple[str, ...] = option(
        (), "serve queues placed over the shards of the Redis Cluster with these nodes "
        "(comma-separated URLs) instead of --url", ("--cluster",), "urls", cli="core",
        metavar="URLS", parse=_url_list)
    shards: int = option(16, "with --cluster: the number of shards queues are placed over",
                         ("--shards",), "int", 1, _max_shards, cli="core")
    verbosity: int = 0
    sandbox_root: str = field(
        default_factory=lambda: os.path.join(tempfile.gettempdir(), "qless"),
        metadata={"option": OptionSpec("", None, "parent of per-worker sandboxes",
                                       ("--sandbox-root",))})
    queue_refresh: float = 10.0  # seconds between re-resolving glob queue patterns
    respawn_min_uptime: float = 1.0  # a child dying sooner counts toward the back-off
    respawn_max_backoff: float = 30.0
    reap_interval: float | None = option(
        None, "seconds between lease reaper runs (default: from the heartbeat and "
        "grace-period config; 0 = off)", ("--reap-interval",), "number", 0)
    beat: float = option(
        60.0, "seconds within which a live worker tells Redis so, idle or busy (the dashboard "
        "shows it stale after 1.5 beats, dead after 3)", ("--beat",), "number", 1, 86400)
    start_timeout: float = option(
        30.0, "seconds to wait for Redis at start, then exit 1 (default 30; 0: no wait)",
        ("--start-timeout",), "number", 0, setting="START_TIMEOUT", setting_minimum=0,
        env="QLESS_WORKER_START_TIMEOUT")
    health_file: str | None = option(
        None, "rewrite PATH every few seconds with the worker's state and the time, for "
        "liveness/readiness probes (python -m django_qless.core.probe PATH)",
        ("--health-file",), metavar="PATH", setting="HEALTH_FILE",
        env="QLESS_WORKER_HEALTH_FILE", parse=_writable)
    # A half-open TCP connection must not block a worker forever (None: block).
    socket_timeout: float | None = 30.0
    # Each registered job kind's queue, where known: the start line names those not served.
    job_queues: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    middleware: tuple[Middleware, ...] = field(default=(), compare=False)
    registry: Registry = field(default=default_registry, compare=False, repr=False)
    # Builds the connection instead of `url` (Sentinel, client certificates, a cluster, ...),
    # after fork in every process that needs one: a redis.Redis with decode_responses=True, a
    # core Client or a ShardedClient, with the factory's socket timeouts.
    connect: Callable[[], redis.Redis | QlessClient] | None = field(
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
        """Raise ValueError naming the first option whose declaration refuses its value."""
        for spec in OPTIONS:
            value = getattr(self, spec.name, None)
            if value is not None and value != spec.default:
                spec.check(value)

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
    ) -> QlessClient:
        """Return a new Client, or a ShardedClient with `cluster` (socket_timeout -1: ours)."""
        if self.connect is not None:
            made: Any = self.connect()
            if hasattr(made, "serving"):  # a Client or a ShardedClient, ready to use
                return cast("QlessClient", made)
            return Client(made, worker_name=worker_name)  # (InvalidArgument: not a connection)
        timeout = self.socket_timeout if socket_timeout == -1.0 else socket_timeout
        if self.cluster:
            from django_qless.core.cluster.sharded import ShardedClient

            return ShardedClient(list(self.cluster), shards=self.shards,
                                 worker_name=worker_name, socket_timeout=timeout)
        return Client(self.url, worker_name=worker_name, socket_timeout=timeout)

    def make_reaper(self, worker_name: str) -> LeaseReaper:
        """Return the lease reaper of a supervisor or serial worker (reap_interval 0: beats)."""
        from django_qless.core.upkeep import LeaseReaper  # (loaded once a worker starts)

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


# Settings-only options first and last, as QLESS["WORKER"] lists them.
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("queues", ("default",), kind="queues", cli="none", setting="QUEUES",
               env="QLESS_WORKER_QUEUES"),
    *(replace(f.metadata["option"], name=f.name) for f in fields(WorkerConfig)
      if "option" in f.metadata),
    OptionSpec("heartbeat", None, kind="int", cli="none", setting="HEARTBEAT",
               setting_minimum=1, env="QLESS_WORKER_HEARTBEAT"),
)


def _masked(url: str) -> str:
    """Return `url` with any password (user part, or `password=` in the query) masked."""
    base, mark, query = url.partition("?")
    parts = urlsplit(base)
    if parts.password is not None:
        user, host = parts.username or "", parts.hostname or ""
        netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
        base = urlunsplit(parts._replace(netloc=netloc))
    return base + mark + re.sub(r"(?i)((?:^|&)password=)[^&]*", r"\1***", query)
