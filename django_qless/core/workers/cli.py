"""Command line: `qless-worker` / `python -m django_qless.core.workers`.

Signals: TERM/INT stop now (running jobs are aborted and released to waiting without
spending a retry; a second TERM/INT kills the children at once); QUIT finishes running jobs
and exits; USR1 kills the running job(s) (failed as django_qless.JobKilled) and carries on;
USR2 stops taking jobs and writes every process's stack to stderr; CONT resumes.

Exit codes: 0 stopped as asked (QUIT, TERM/INT with jobs released, --max-jobs,
--max-duration, --dry-run, --print-options); 1 fatal error (e.g. Redis still unreachable
after --start-timeout); 2 bad options; 3 forced stop
(a second TERM/INT killed the children); 4 stopped but some jobs could not be released
(they come back when their lease expires).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import os
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from django_qless.core.exceptions import InvalidArgument, QlessError
from django_qless.core.serialization import check_name
from django_qless.core.workers.config import RESERVERS, WorkerConfig
from django_qless.core.workers.run import run_worker
from django_qless.core.workers.shutdown import ExitCode

__all__ = [
    "add_shared_options",
    "build_parser",
    "check_imports",
    "check_queue_specs",
    "config_from_args",
    "integer",
    "main",
    "non_negative_int",
    "non_negative_number",
    "number",
    "split_command",
]

_INT_TEXT = re.compile(r"-?[0-9]+")
_NUM_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
# A glob queue pattern: the name charset plus the glob characters fnmatch understands.
_PATTERN = re.compile(r"[A-Za-z0-9_.\-*?\[\]!]{1,128}")
_SCHEMES = ("redis", "rediss", "unix")


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


def check_queue_specs(specs: Iterable[str]) -> None:
    """Refuse a queue name or glob pattern the engine could never serve (ValueError)."""
    for spec in " ".join(specs).replace(",", " ").split():
        if any(ch in spec for ch in "*?["):
            if not _PATTERN.fullmatch(spec):
                raise ValueError(f"argument queues: invalid queue pattern {spec[:80]!r}: use "
                                 "A-Z a-z 0-9 _ . - and the glob characters * ? [ ] !")
            continue
        try:
            check_name("queue", spec)
        except InvalidArgument as exc:
            raise ValueError(f"argument queues: {exc}") from None


def split_command(text: str | None) -> tuple[str, ...]:
    """Split the --exec command line like a shell would (ValueError naming --exec)."""
    if not text:
        return ()
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"argument --exec: cannot parse {text[:80]!r}: {exc}") from None
    if not words:
        raise ValueError("argument --exec: the command is empty")
    return words


def check_imports(modules: Iterable[str]) -> None:
    """Refuse an --import module that cannot be found, before anything starts."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise ValueError(f"argument --import: no module named {name!r}")


def _check_url(url: str) -> None:
    """Refuse a Redis URL whose scheme redis-py does not know (never echo the URL)."""
    scheme = urlsplit(url).scheme
    if scheme not in _SCHEMES:
        raise ValueError(f"argument --url: must start with redis://, rediss:// or unix://, "
                         f"got scheme {scheme[:20]!r}")


def add_shared_options(p: argparse.ArgumentParser) -> None:
    """Add the options `qless-worker` and `manage.py qless_worker` declare alike."""
    p.add_argument("--fork-per-job", action="store_true", help="a fresh child for every job")
    p.add_argument("--no-prefetch", dest="prefetch", action="store_false",
                   help="never hold a job ahead while short jobs run (see docs/worker.md)")
    p.add_argument("--child-max-jobs", type=non_negative_int, default=0,
                   help="replace a child after this many jobs (0: never)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE before forking (it registers jobs); repeatable")
    p.add_argument("--max-duration", type=non_negative_number, default=0.0,
                   help="stop after SECONDS")
    p.add_argument("--resume", action="store_true",
                   help="first run the jobs this worker name still holds (use with --name)")
    p.add_argument("--dry-run", action="store_true", help="check setup, take no job")
    p.add_argument("--print-options", action="store_true", help="print options and exit")
    p.add_argument("--exec", dest="exec_command", default=None, metavar="COMMAND",
                   help="run COMMAND per job: data JSON on stdin, jid as last argument")
    p.add_argument("--kill-grace", type=non_negative_number, default=5.0,
                   help="seconds between TERM and KILL for a job over its limit")
    p.add_argument("--shutdown-grace", type=non_negative_number, default=10.0,
                   help="seconds TERM waits for children before killing them")
    p.add_argument("--reap-interval", type=non_negative_number, default=None,
                   help="seconds between lease reaper runs (default: from the heartbeat and "
                        "grace-period config; 0 = off)")
    p.add_argument("--start-timeout", type=non_negative_number, default=None,
                   help="seconds to wait for Redis at start, then exit 1 (default 30; 0: "
                        "no wait)")
    p.add_argument("--name", default=None, help="worker name (default host-pid)")
    p.add_argument("--sandbox-root", default=None, help="parent of per-worker sandboxes")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    p = argparse.ArgumentParser(
        prog="qless-worker",
        description="Run qless jobs from Redis (no Django needed).",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("queues", nargs="*", help="queue names or glob patterns (a,b or a b)")
    p.add_argument("--url", default=os.environ.get("QLESS_URL", "redis://localhost:6379/0"),
                   help="Redis URL (default $QLESS_URL or redis://localhost:6379/0)")
    p.add_argument("-n", "--processes", type=non_negative_int, default=None,
                   help="children to pre-fork (default: CPU count; 0: run jobs in-process)")
    p.add_argument("--reserver", choices=RESERVERS, default="ordered")
    p.add_argument("--max-jobs", type=non_negative_int, default=0,
                   help="run at most this many jobs, all children together, then exit")
    p.add_argument("--interval", type=number, default=5.0,
                   help="idle safety re-check in seconds (wake-ups arrive on pubsub)")
    p.add_argument("--timeout", type=non_negative_number, default=0.0,
                   help="per-job time limit (seconds)")
    p.add_argument("--allow-module", action="append", default=[], metavar="PREFIX",
                   help="allow job classes under this module prefix to be imported")
    add_shared_options(p)
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v info, -vv debug")
    return p


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    """Turn parsed arguments into a WorkerConfig (ValueError on bad values)."""
    from django_qless.core.registry import default_registry

    _check_url(args.url)
    check_queue_specs(args.queues)
    exec_command = split_command(args.exec_command)
    check_imports(args.imports)
    if args.allow_module:
        default_registry.allow_module_prefixes(*args.allow_module)
    extra: dict[str, Any] = {"sandbox_root": args.sandbox_root} if args.sandbox_root else {}
    if args.start_timeout is not None:
        extra["start_timeout"] = args.start_timeout
    return WorkerConfig(
        url=args.url,
        queues=tuple(args.queues),
        processes=args.processes,
        reserver=args.reserver,
        fork_per_job=args.fork_per_job,
        prefetch=args.prefetch,
        child_max_jobs=args.child_max_jobs,
        import_modules=tuple(args.imports),
        max_jobs=args.max_jobs,
        max_duration=args.max_duration,
        interval=args.interval,
        resume=args.resume,
        dry_run=args.dry_run,
        print_options=args.print_options,
        exec_command=exec_command,
        timeout=args.timeout,
        kill_grace=args.kill_grace,
        shutdown_grace=args.shutdown_grace,
        reap_interval=args.reap_interval,
        name=args.name,
        verbosity=args.verbose,
        **extra,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the worker CLI; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"qless-worker: error: {exc}\n")
        return ExitCode.USAGE
    try:
        return run_worker(config)
    except ImportError as exc:
        sys.stderr.write(f"qless-worker: cannot import job module: {exc}\n")
        return ExitCode.ERROR
    except QlessError as exc:
        sys.stderr.write(f"qless-worker: {exc}\n")
        return ExitCode.ERROR
