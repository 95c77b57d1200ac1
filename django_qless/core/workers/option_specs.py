"""Every worker option, declared once.

From this table come the defaults of `WorkerConfig`, the options of both command lines
(`qless-worker` and `manage.py qless_worker`) and the keys of `QLESS["WORKER"]` (with their
environment variables). Adding an option means adding a line here and, if it is a
`WorkerConfig` field, the field (whose default reads the table).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "OPTIONS",
    "OptionSpec",
    "add_options",
    "default_of",
    "integer",
    "non_negative_int",
    "non_negative_number",
    "number",
    "option_values",
    "positive_number",
    "setting_keys",
    "shard_count",
    "url_list",
    "worker_name",
]

Kind = Literal["int", "number", "choice", "flag", "no_flag", "append", "str", "queues", "urls"]
Cli = Literal["both", "core", "none"]

_INT_TEXT = re.compile(r"-?[0-9]+")
_NUM_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def integer(text: str) -> int:
    """Parse a plain decimal integer (argparse type; no spaces, '_', '+' or floats)."""
    if not _INT_TEXT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    return int(text)


def non_negative_int(text: str) -> int:
    """Parse an integer >= 0 (argparse type)."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def url_list(text: str) -> tuple[str, ...]:
    """Parse comma-separated Redis URLs (argparse type; each redis://, rediss:// or unix://)."""
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise argparse.ArgumentTypeError("give at least one node URL")
    for url in urls:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise argparse.ArgumentTypeError(
                "each node URL must start with redis://, rediss:// or unix://")
    return urls


def number(text: str) -> float:
    """Parse a finite decimal number (argparse type; no nan, inf, hex or spaces)."""
    if not _NUM_TEXT.fullmatch(text) or not math.isfinite(float(text)):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return float(text)


def non_negative_number(text: str) -> float:
    """Parse a finite number >= 0 (argparse type)."""
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_number(text: str) -> float:
    """Parse a finite number > 0 (argparse type)."""
    value = number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def shard_count(text: str) -> int:
    """Parse a shard count the placement can use (argparse type)."""
    from django_qless.core.cluster.placement import MAX_SHARDS

    value = integer(text)
    if not 1 <= value <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"must be in [1, {MAX_SHARDS}], got {text!r}")
    return value


def worker_name(text: str) -> str:
    """Parse a worker name: 1-128 printable ASCII characters, no space or ':'."""
    if not _NAME_TEXT.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"must be 1-128 printable ASCII characters without ' ' or ':', got {text[:140]!r}")
    return text


_NAME_TEXT = re.compile(r"[\x21-\x39\x3b-\x7e]{1,128}")


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
    cli: Cli = "both"  # "core": qless-worker only (manage.py has its own, e.g. --alias)
    setting: str | None = None  # the QLESS["WORKER"] key
    setting_minimum: float | None = None  # settings: smallest value accepted
    env: str | None = None  # read when the setting is absent
    parse: Any = None  # the command line's argparse type, when the kind's is not enough

    @property
    def key(self) -> str:
        """Return the argparse dest."""
        return self.dest or self.name


RESERVERS = ("ordered", "round-robin", "shuffled")

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


def _argparse_type(spec: OptionSpec) -> Any:
    if spec.parse is not None:
        return spec.parse
    if spec.kind == "int":
        return non_negative_int if spec.minimum == 0 else integer
    if spec.kind == "number":
        return non_negative_number if spec.minimum == 0 else number
    if spec.kind == "urls":
        return url_list
    return None


def add_options(parser: argparse.ArgumentParser, *, django: bool = False,
                aliases: Mapping[str, Iterable[str]] | None = None) -> None:
    """Add every command-line worker option to `parser`.

    Values not given are None (flags: False), so a caller can tell them from a default and
    fill them from settings; `option_values` drops them. `aliases` adds flags to an option.
    """
    for spec in OPTIONS:
        if spec.cli == "none" or (django and spec.cli == "core"):
            continue
        flags = (*(aliases or {}).get(spec.name, ()), *spec.flags)
        if spec.kind == "flag":
            parser.add_argument(*flags, dest=spec.key, action="store_true", help=spec.help)
        elif spec.kind == "no_flag":
            parser.add_argument(*flags, dest=spec.key, action="store_false", default=None,
                                help=spec.help)
        elif spec.kind == "append":
            parser.add_argument(*flags, dest=spec.key, action="append", default=[],
                                metavar=spec.metavar, help=spec.help)
        elif spec.kind == "choice":
            parser.add_argument(*flags, dest=spec.key, choices=spec.choices, default=None)
        else:
            parser.add_argument(*flags, dest=spec.key, type=_argparse_type(spec), default=None,
                                metavar=spec.metavar, help=spec.help)


def option_values(given: Mapping[str, Any], *, django: bool = False) -> dict[str, Any]:
    """Return the WorkerConfig arguments among parsed options (not given: left out)."""
    values: dict[str, Any] = {}
    for spec in OPTIONS:
        if spec.cli == "none" or (django and spec.cli == "core"):
            continue
        value = given.get(spec.key)
        if value is None or (spec.kind == "append" and not value):
            continue
        values[spec.name] = tuple(value) if spec.kind == "append" else value
    return values
