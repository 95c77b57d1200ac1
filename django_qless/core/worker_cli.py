"""Command line: `qless-worker` / `python -m django_qless.core.workers`, and `run_worker`.

Signals: TERM/INT take no new job and let running jobs finish for up to --term-grace
seconds, then release them to waiting without spending a retry (a second TERM/INT: at once;
one more kills the children); QUIT finishes running jobs and exits; USR1 kills the running
job(s) (failed as django_qless.JobKilled); USR2 stops taking jobs and writes every process's
stack to stderr; CONT resumes. TERM/INT/QUIT during start-up exit 0.

Exit codes: 0 stopped as asked (QUIT, TERM/INT with jobs finished or released, --max-jobs,
--max-duration, --dry-run, --print-options); 1 fatal error (e.g. Redis still unreachable
after --start-timeout); 2 bad options; 3 forced stop (a TERM/INT after the one that released
the jobs killed the children); 4 stopped but some jobs could not be released (they come back
when their lease expires).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, TextIO
from urllib.parse import urlsplit

import redis

from django_qless import __version__
from django_qless.core.exceptions import InvalidArgument, QlessError
from django_qless.core.health import check_eviction, clock_skew
from django_qless.core.serialization import check_name
from django_qless.core.worker_options import (
    WorkerConfig,
    add_options,
    default_worker_name,
    option_values,
)
from django_qless.core.workers.runner import WorkerHooks
from django_qless.core.workers.shards import QueueSelection, is_pattern, known_queues
from django_qless.core.workers.shutdown import ExitCode

if TYPE_CHECKING:
    from django_qless.core.probe import HealthFile
    from django_qless.core.workers.forking import ForkingWorker
    from django_qless.core.workers.serial import SerialWorker

__all__ = ["StoppedBeforeStart", "build_parser", "check_queue_specs", "config_from_args",
           "dry_run", "import_modules", "main", "make_worker", "run_worker",
           "stop_before_start", "wait_for_redis"]

log = logging.getLogger("django_qless.worker")
_ERRORS = (QlessError, redis.RedisError, OSError)
_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
# A glob queue pattern: the name charset plus the glob characters fnmatch understands.
_PATTERN = re.compile(r"[A-Za-z0-9_.\-*?\[\]!]{1,128}")


def import_modules(names: tuple[str, ...]) -> None:
    """Import job modules (they register their jobs) before any fork."""
    for name in names:
        importlib.import_module(name)


def make_worker(
    config: WorkerConfig, hooks: WorkerHooks | None = None
) -> SerialWorker | ForkingWorker:
    """Return a SerialWorker (processes=0) or a ForkingWorker, importing only that one."""
    if config.serial:
        from django_qless.core.workers.serial import SerialWorker

        return SerialWorker(config, hooks)
    from django_qless.core.workers.forking import ForkingWorker

    return ForkingWorker(config, hooks)


class StoppedBeforeStart(SystemExit):
    """TERM, INT or QUIT reached the worker before it handled signals itself: exit 0."""

    def __init__(self, signum: int) -> None:
        super().__init__(ExitCode.OK)
        self.signum = signum


def _stop_start(signum: int, frame: FrameType | None) -> NoReturn:
    raise StoppedBeforeStart(signum)


@contextmanager
def stop_before_start() -> Iterator[None]:
    """Let TERM, INT or QUIT stop the block with StoppedBeforeStart (nothing taken yet)."""
    # The worker's own handlers replace ours as it starts: restore only what is still ours
    # (a worker stopped by TERM leaves TERM ignored on purpose).
    main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, _stop_start) for signum in _STOPS} if main else {}
    try:
        yield
    except StoppedBeforeStart as exc:
        log.warning("stopped before starting (%s): no job was taken",
                    signal.Signals(exc.signum).name)
        raise
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is _stop_start:
                signal.signal(signum, handler)


def run_worker(
    config: WorkerConfig, hooks: WorkerHooks | None = None, out: TextIO | None = None
) -> int:
    """Import job modules, honour print_options/dry_run, then run; return the exit code."""
    out = out or sys.stdout
    if config.print_options:
        out.write(json.dumps(config.as_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return ExitCode.OK
    if not config.queues:
        out.write("no queues given\n")
        return ExitCode.USAGE
    try:
        with stop_before_start():
            if config.health_file and not config.dry_run:
                _health_file(config).write("starting")
            import_modules(config.import_modules)
            if config.dry_run:
                return dry_run(config, out)
            if not wait_for_redis(config):
                return ExitCode.ERROR
            _warn_about_settings(config)
            _log_start(config)
            # Until its first line installs the worker's handlers, ours still stop the start.
            return make_worker(config, hooks).run_forever()
    except StoppedBeforeStart:
        return ExitCode.OK


def dry_run(config: WorkerConfig, out: TextIO) -> int:
    """Check Redis, resolve the queues, list runnable jobs; take nothing."""
    client = config.make_client(socket_timeout=5.0)
    try:
        queues = QueueSelection(config.queues, known_queues(client)).names()
        counts = {q: client.for_queue(q).queues[q].counts for q in queues}
    except (QlessError, redis.RedisError) as exc:
        out.write(f"dry run: cannot use Redis at {config.safe_url}: {exc}\n")
        return ExitCode.ERROR
    finally:
        client.close()
    mode = "serial" if config.serial else f"forking, children: {config.process_count}"
    out.write(f"dry run: would serve {', '.join(queues) or '(no queue yet)'} ({mode})\n")
    for queue, info in counts.items():
        out.write(f"  {queue}: {info.get('waiting', 0) if isinstance(info, dict) else '?'} "
                  "waiting\n")
    if config.exec_command:
        out.write(f"  every job runs: {' '.join(config.exec_command)} <jid>\n")
        return ExitCode.OK
    out.write(f"  registered jobs: {', '.join(config.registry.names()) or '(none)'}\n")
    if config.registry.module_prefixes:
        out.write(f"  importable under: {', '.join(config.registry.module_prefixes)}\n")
    return ExitCode.OK


def _log_start(config: WorkerConfig) -> None:
    """Log the start line, then warn about registered job kinds whose queues are not served."""
    role, mode = "worker", "serial"
    if not config.serial:
        count = config.process_count
        role, mode = "supervisor", f"forking, {count} {'child' if count == 1 else 'children'}"
        mode += ", fork per job" if config.fork_per_job else ""
    log.info("django-qless %s %s %s (pid %d) starting: %s, queues %s%s, Redis %s", __version__,
             role, config.name or default_worker_name(), os.getpid(), mode,
             ",".join(config.queues), _resolved(config), config.safe_url)
    selection = QueueSelection(config.queues, list)
    unserved = sorted((kind, queue) for kind, queue in config.job_queues.items()
                      if not selection.matches(queue))
    if unserved:
        listed = ", ".join(f"{kind} (queue {queue})" for kind, queue in unserved[:20])
        more = f" and {len(unserved) - 20} more" if len(unserved) > 20 else ""
        log.warning("registered job kinds whose queues this worker does not serve (their jobs "
                    "wait for another worker): %s%s", listed, more)


def _resolved(config: WorkerConfig) -> str:
    """Return what the queue patterns match now, for the start line ("" without patterns)."""
    if not any(is_pattern(spec) for spec in config.queues):
        return ""
    try:
        client = config.make_client(socket_timeout=5.0)
        try:
            names = QueueSelection(config.queues, known_queues(client)).names()
        finally:
            client.close()
    except (QlessError, redis.RedisError) as exc:
        return f" (not resolved: {exc})"
    return f" (now {','.join(names) or 'no queue yet'})"


def wait_for_redis(config: WorkerConfig) -> bool:
    """Ping Redis until it answers or `config.start_timeout` seconds pass (False: gave up)."""
    limit, url = config.start_timeout, config.safe_url
    deadline, delay, patience, told_at = time.monotonic() + limit, 0.1, 1.0, 0.0
    health = _health_file(config) if config.health_file else None
    while True:
        if health is not None:
            health.beat("starting")  # alive, not ready: a liveness probe holds meanwhile
        # An attempt's socket timeouts stay within the time left (the first within 1 s): a
        # server that accepts connections and never answers cannot stretch the wait.
        left = deadline - time.monotonic()
        error = _ping(config, min(patience, max(0.2, left)) if limit else 5.0)
        patience, now = min(patience * 2, 5.0), time.monotonic()
        if error is None or now >= deadline:
            break
        if not told_at:
            log.warning("waiting for Redis at %s: unreachable (%s); trying for up to %gs "
                        "(--start-timeout)", url, error, limit)
            told_at = now
        elif now - told_at >= 10.0:
            log.warning("still waiting for Redis at %s (%.0fs left)", url, deadline - now)
            told_at = now
        time.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 2, 2.0)
    if error is None and told_at:
        log.info("Redis at %s is reachable now", url)
    elif error is not None:
        log.error("Redis at %s is still unreachable after %gs (%s); giving up "
                  "(--start-timeout)", url, limit, error)
    return error is None


def _health_file(config: WorkerConfig) -> HealthFile:
    from django_qless.core.probe import HealthFile  # (loaded only when asked for)

    return HealthFile(config.health_file or "", config.name or default_worker_name())


def _ping(config: WorkerConfig, timeout: float) -> Exception | None:
    """Ping Redis once with `timeout`-second socket timeouts; return the error, if any."""
    try:
        client = config.make_client(socket_timeout=timeout)
        try:
            for shard in client.clients()[:1]:  # a cluster: its transport knows every node
                shard.read(lambda r: r.ping(), attempts=1)
        finally:
            client.close()
    except _ERRORS as exc:
        return exc
    return None


def _warn_about_settings(config: WorkerConfig) -> None:
    """Log an error if Redis may evict keys, and a warning if the clocks disagree."""
    deployment = config.make_client(socket_timeout=5.0)
    try:
        # A cluster: the node of the first shard speaks for the others (one configuration).
        client = deployment.clients()[0]
        node = client.node_redis()
        warning, skew = check_eviction(node), clock_skew(node)
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


def check_queue_specs(specs: Iterable[str]) -> None:
    """Refuse no queue, or a queue name or glob pattern the engine cannot serve (ValueError)."""
    given = " ".join(specs).replace(",", " ").split()
    if not given:
        raise ValueError("argument queues: no queues given")
    for spec in given:
        if not is_pattern(spec):
            try:
                check_name("queue", spec)
            except InvalidArgument as exc:
                raise ValueError(f"argument queues: {exc}") from None
        elif not _PATTERN.fullmatch(spec):
            raise ValueError(f"argument queues: invalid queue pattern {spec[:80]!r}: use "
                             "A-Z a-z 0-9 _ . - and the glob characters * ? [ ] !")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    p = argparse.ArgumentParser(
        prog="qless-worker", description="Run qless jobs from Redis (no Django needed).",
        epilog=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
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

    scheme = urlsplit(args.url).scheme  # (never echo the URL: it may hold a password)
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError("argument --url: must start with redis://, rediss:// or unix://, "
                         f"got scheme {scheme[:20]!r}")
    if args.queues or not args.print_options:
        check_queue_specs(args.queues)
    if args.allow_module:
        default_registry.allow_module_prefixes(*args.allow_module)
    return WorkerConfig(url=args.url, queues=tuple(args.queues), verbosity=args.verbose,
                        **option_values(vars(args)))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the worker CLI; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2), stream=sys.stderr,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"qless-worker: error: {exc}\n")
        return ExitCode.USAGE
    try:
        return run_worker(config)
    except (ImportError, QlessError) as exc:
        why = "cannot import job module: " if isinstance(exc, ImportError) else ""
        sys.stderr.write(f"qless-worker: {why}{exc}\n")
        return ExitCode.ERROR
