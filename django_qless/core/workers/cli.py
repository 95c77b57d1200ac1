"""Command line: `qless-worker` / `python -m django_qless.core.workers`, and `run_worker`.

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
import importlib
import importlib.util
import json
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

import redis

from django_qless.core.exceptions import InvalidArgument, QlessError
from django_qless.core.health import check_eviction, clock_skew
from django_qless.core.serialization import check_name
from django_qless.core.workers.hooks import WorkerHooksProtocol
from django_qless.core.workers.option_specs import (
    add_options,
    integer,
    non_negative_int,
    non_negative_number,
    number,
    option_values,
)
from django_qless.core.workers.shards import QueueSelection, known_queues
from django_qless.core.workers.shutdown import ExitCode
from django_qless.core.workers.worker_config import WorkerConfig

if TYPE_CHECKING:
    from django_qless.core.workers.forking import ForkingWorker
    from django_qless.core.workers.serial import SerialWorker

__all__ = [
    "build_parser",
    "check_imports",
    "check_queue_specs",
    "config_from_args",
    "dry_run",
    "import_modules",
    "integer",
    "main",
    "make_worker",
    "non_negative_int",
    "non_negative_number",
    "number",
    "run_worker",
    "split_command",
    "wait_for_redis",
    "warn_about_eviction",
    "worker_class",
]

log = logging.getLogger("django_qless.worker")


def import_modules(names: tuple[str, ...]) -> None:
    """Import job modules (they register their jobs) before any fork."""
    for name in names:
        importlib.import_module(name)


def worker_class(config: WorkerConfig) -> type[SerialWorker] | type[ForkingWorker]:
    """Return SerialWorker (processes=0) or ForkingWorker, importing only that kind's modules."""
    if config.serial:
        from django_qless.core.workers.serial import SerialWorker

        return SerialWorker
    from django_qless.core.workers.forking import ForkingWorker

    return ForkingWorker


def make_worker(
    config: WorkerConfig, hooks: WorkerHooksProtocol | None = None
) -> SerialWorker | ForkingWorker:
    """Return a SerialWorker (processes=0) or a ForkingWorker."""
    return worker_class(config)(config, hooks)


def dry_run(config: WorkerConfig, out: TextIO) -> int:
    """Check Redis, resolve the queues, list runnable jobs; take nothing."""
    client = config.make_client(socket_timeout=5.0)
    try:
        selection = QueueSelection(config.queues, known_queues(client))
        queues = selection.names()
        counts = {q: client.for_queue(q).queues[q].counts for q in queues}
    except (QlessError, redis.RedisError) as exc:
        out.write(f"dry run: cannot use Redis at {config.safe_url}: {exc}\n")
        return ExitCode.ERROR
    finally:
        client.close()
    mode = "serial" if config.serial else f"forking, children: {config.process_count}"
    out.write(f"dry run: would serve {', '.join(queues) or '(no queue yet)'} ({mode})\n")
    for queue, info in counts.items():
        waiting = info.get("waiting", 0) if isinstance(info, dict) else "?"
        out.write(f"  {queue}: {waiting} waiting\n")
    if config.exec_command:
        out.write(f"  every job runs: {' '.join(config.exec_command)} <jid>\n")
    else:
        names = config.registry.names()
        out.write(f"  registered jobs: {', '.join(names) or '(none)'}\n")
        prefixes = config.registry.module_prefixes
        if prefixes:
            out.write(f"  importable under: {', '.join(prefixes)}\n")
    return ExitCode.OK


def run_worker(
    config: WorkerConfig, hooks: WorkerHooksProtocol | None = None, out: TextIO | None = None
) -> int:
    """Import job modules, honour print_options/dry_run, then run; return the exit code."""
    out = out or sys.stdout
    if config.print_options:
        out.write(json.dumps(config.as_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return ExitCode.OK
    if not config.queues:
        out.write("no queues given\n")
        return ExitCode.USAGE
    import_modules(config.import_modules)
    if config.dry_run:
        return dry_run(config, out)
    # Loaded before Redis is checked: the worker sets its signal handlers moments after.
    kind = worker_class(config)
    if not wait_for_redis(config):
        return ExitCode.ERROR
    warn_about_eviction(config)
    return kind(config, hooks).run_forever()


def wait_for_redis(config: WorkerConfig) -> bool:
    """Ping Redis until it answers or `config.start_timeout` seconds pass (False: gave up)."""
    limit = config.start_timeout
    deadline = time.monotonic() + limit
    delay = 0.1
    first_error: float | None = None
    told_at = 0.0
    while True:
        left = deadline - time.monotonic()
        client = config.make_client(socket_timeout=min(5.0, max(0.2, left)))
        try:
            for shard in client.clients()[:1]:  # a cluster: its transport knows every node
                shard.read(lambda r: r.ping())
            if first_error is not None:
                log.info("Redis at %s is reachable now", config.safe_url)
            return True
        except (QlessError, redis.RedisError, OSError) as exc:
            error = exc
        finally:
            client.close()
        now = time.monotonic()
        if now >= deadline:
            log.error("Redis at %s is still unreachable after %gs (%s); giving up "
                      "(--start-timeout)", config.safe_url, limit, error)
            return False
        if first_error is None:
            first_error = told_at = now
            log.warning("Redis at %s is unreachable (%s); waiting up to %gs for it",
                        config.safe_url, error, limit)
        elif now - told_at >= 10.0:
            told_at = now
            log.warning("still waiting for Redis at %s (%.0fs left)", config.safe_url,
                        deadline - now)
        time.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 2, 2.0)


def warn_about_eviction(config: WorkerConfig) -> None:
    """Log an error if Redis may evict keys, and a warning if the clocks disagree."""
    deployment = config.make_client(socket_timeout=5.0)
    try:
        # A cluster: the node of the first shard speaks for the others (one configuration).
        client = deployment.clients()[0]
        node = client.node_redis()
        warning = check_eviction(node)
        skew = clock_skew(node)
        heartbeat = float(client.config["heartbeat"] or 60)
    except (QlessError, redis.RedisError) as exc:
        log.warning("could not check the Redis server's settings: %s", exc)
        return
    finally:
        deployment.close()
    if warning:
        log.error("%s", warning)
    # Leases use the Redis clock, but a far-off local clock still means this host's logs,
    # schedules and timeouts disagree with everyone else's.
    if abs(skew) > heartbeat / 4:
        log.warning("this host's clock is %+.1fs off the Redis server's (heartbeat %gs): "
                    "check NTP", skew, heartbeat)

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
