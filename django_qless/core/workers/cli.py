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
import os
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from django_qless.core.exceptions import InvalidArgument, QlessError
from django_qless.core.serialization import check_name
from django_qless.core.workers.option_specs import (
    add_options,
    integer,
    non_negative_int,
    non_negative_number,
    number,
    option_values,
)
from django_qless.core.workers.run import run_worker
from django_qless.core.workers.shutdown import ExitCode
from django_qless.core.workers.worker_config import WorkerConfig

__all__ = [
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

# A glob queue pattern: the name charset plus the glob characters fnmatch understands.
_PATTERN = re.compile(r"[A-Za-z0-9_.\-*?\[\]!]{1,128}")
_SCHEMES = ("redis", "rediss", "unix")


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
    p.add_argument("--allow-module", action="append", default=[], metavar="PREFIX",
                   help="allow job classes under this module prefix to be imported")
    add_options(p)
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
    given = {**option_values(vars(args)), "exec_command": exec_command}
    values = {n: v for n, v in given.items() if n in WorkerConfig.__dataclass_fields__}
    return WorkerConfig(url=args.url, queues=tuple(args.queues), verbosity=args.verbose,
                        **values)


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
