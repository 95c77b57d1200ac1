"""Command line: `qless-worker` / `python -m django_qless.core.workers`.

Signals: TERM/INT stop now (running jobs are aborted and released to waiting without
spending a retry; a second TERM/INT kills the children at once); QUIT finishes running jobs
and exits; USR1 kills the running job(s) (failed as django_qless.JobKilled) and carries on;
USR2 stops taking jobs and writes every process's stack to stderr; CONT resumes.

Exit codes: 0 stopped as asked (QUIT, TERM/INT with jobs released, --max-jobs,
--max-duration, --dry-run, --print-options); 1 fatal error; 2 bad options; 3 forced stop
(a second TERM/INT killed the children); 4 stopped but some jobs could not be released
(they come back when their lease expires).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Sequence

from django_qless.core.exceptions import QlessError
from django_qless.core.workers.config import RESERVERS, WorkerConfig
from django_qless.core.workers.run import run_worker
from django_qless.core.workers.shutdown import ExitCode

__all__ = ["build_parser", "config_from_args", "main"]


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
    p.add_argument("-n", "--processes", type=int, default=None,
                   help="children to pre-fork (default: CPU count; 0: run jobs in-process)")
    p.add_argument("--reserver", choices=RESERVERS, default="ordered")
    p.add_argument("--fork-per-job", action="store_true", help="a fresh child for every job")
    p.add_argument("--child-max-jobs", type=int, default=0,
                   help="replace a child after this many jobs (0: never)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE before forking (it registers jobs); repeatable")
    p.add_argument("--allow-module", action="append", default=[], metavar="PREFIX",
                   help="allow job classes under this module prefix to be imported")
    p.add_argument("--max-jobs", type=int, default=0, help="stop after this many jobs")
    p.add_argument("--max-duration", type=float, default=0.0, help="stop after SECONDS")
    p.add_argument("--interval", type=float, default=5.0,
                   help="idle safety re-check in seconds (wake-ups arrive on pubsub)")
    p.add_argument("--resume", action="store_true",
                   help="first run the jobs this worker name still holds (use with --name)")
    p.add_argument("--dry-run", action="store_true", help="check setup, take no job")
    p.add_argument("--print-options", action="store_true", help="print options and exit")
    p.add_argument("--exec", dest="exec_command", default=None, metavar="COMMAND",
                   help="run COMMAND per job: data JSON on stdin, jid as last argument")
    p.add_argument("--timeout", type=float, default=0.0, help="per-job time limit (seconds)")
    p.add_argument("--kill-grace", type=float, default=5.0,
                   help="seconds between TERM and KILL for a job over its limit")
    p.add_argument("--shutdown-grace", type=float, default=10.0,
                   help="seconds TERM waits for children before killing them")
    p.add_argument("--name", default=None, help="worker name (default host-pid)")
    p.add_argument("--sandbox-root", default=None, help="parent of per-worker sandboxes")
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v info, -vv debug")
    return p


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    """Turn parsed arguments into a WorkerConfig (ValueError on bad values)."""
    from django_qless.core.registry import default_registry

    if args.allow_module:
        default_registry.allow_module_prefixes(*args.allow_module)
    extra = {"sandbox_root": args.sandbox_root} if args.sandbox_root else {}
    return WorkerConfig(
        url=args.url,
        queues=tuple(args.queues),
        processes=args.processes,
        reserver=args.reserver,
        fork_per_job=args.fork_per_job,
        child_max_jobs=args.child_max_jobs,
        import_modules=tuple(args.imports),
        max_jobs=args.max_jobs,
        max_duration=args.max_duration,
        interval=args.interval,
        resume=args.resume,
        dry_run=args.dry_run,
        print_options=args.print_options,
        exec_command=tuple(shlex.split(args.exec_command)) if args.exec_command else (),
        timeout=args.timeout,
        kill_grace=args.kill_grace,
        shutdown_grace=args.shutdown_grace,
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
