"""Command line: `qless-worker` / `python -m django_qless.core.workers`, and `run_worker`.

Signals: TERM/INT take no new job and let running jobs finish for up to --term-grace
seconds, then abort them and release them to waiting without spending a retry (with
--term-grace 0 at once; a second TERM/INT releases them now, one more kills the children);
QUIT finishes running jobs and exits; USR1 kills the running job(s) (failed as
django_qless.JobKilled) and carries on; USR2 stops taking jobs and writes every process's
stack to stderr; CONT resumes.

Exit codes: 0 stopped as asked (QUIT, TERM/INT with jobs finished or released, --max-jobs,
--max-duration, --dry-run, --print-options); 1 fatal error (e.g. Redis still unreachable
after --start-timeout); 2 bad options; 3 forced stop (a TERM/INT after the one that released
the jobs killed the children); 4 stopped but some jobs could not be released (they come back
when their lease expires).
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
from django_qless.core.workers.hooks import WorkerHooksProtocol
from django_qless.core.workers.shards import QueueSelection, is_pattern, known_queues
from django_qless.core.workers.shutdown import ExitCode
from django_qless.core.workers.worker_config import (
    WorkerConfig,
    add_options,
    default_worker_name,
    option_values,
)

if TYPE_CHECKING:
    from django_qless.core.probe import HealthFile
    from django_qless.core.workers.forking import ForkingWorker
    from django_qless.core.workers.serial import SerialWorker

__all__ = ["build_parser", "check_health_file", "check_imports", "check_queue_specs",
           "config_from_args", "dry_run", "import_modules", "log_start", "main", "make_worker",
           "run_worker", "split_command", "stop_before_start", "StoppedBeforeStart",
           "wait_for_redis", "warn_about_eviction", "worker_class"]

log = logging.getLogger("django_qless.worker")


def import_modules(names: tuple[str, ...]) -> None:
    """Import job modules (they register their jobs) before any fork."""
    for name in names:
        importlib.import_module(name)


def worker_class(config: WorkerConfig) -> type[SerialWorker] | type[ForkingWorker]:
    """Return SerialWorker (processes=0) or ForkingWorker, importing only that one."""
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


class StoppedBeforeStart(SystemExit):
    """TERM, INT or QUIT reached the worker before it handled signals itself: exit 0."""

    def __init__(self, signum: int) -> None:
        super().__init__(ExitCode.OK)
        self.signum = signum


def _stop_start(signum: int, frame: FrameType | None) -> NoReturn:
    raise StoppedBeforeStart(signum)


_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


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
    try:
        with stop_before_start():
            return _start(config, hooks, out)
    except StoppedBeforeStart:
        return ExitCode.OK


def _start(config: WorkerConfig, hooks: WorkerHooksProtocol | None, out: TextIO) -> int:
    health = None if config.dry_run else _health_file(config)
    if health is not None:
        health.write("starting")
    import_modules(config.import_modules)
    if config.dry_run:
        return dry_run(config, out)
    kind = worker_class(config)
    if not wait_for_redis(config):
        return ExitCode.ERROR
    warn_about_eviction(config)
    log_start(config)
    # Until its first line installs the worker's handlers, ours still stop the start.
    return kind(config, hooks).run_forever()


def log_start(config: WorkerConfig) -> None:
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
    client = None
    try:
        client = config.make_client(socket_timeout=5.0)
        names = QueueSelection(config.queues, known_queues(client)).names()
    except (QlessError, redis.RedisError) as exc:
        return f" (not resolved: {exc})"
    finally:
        if client is not None:
            client.close()
    return f" (now {','.join(names) or 'no queue yet'})"


def wait_for_redis(config: WorkerConfig) -> bool:
    """Ping Redis until it answers or `config.start_timeout` seconds pass (False: gave up)."""
    # Each attempt's socket timeouts are bounded by the time left (the first by 1 s, so a
    # server that accepts connections and never answers is reported at once): such a server
    # cannot stretch the wait past the limit.
    limit = config.start_timeout
    deadline = time.monotonic() + limit
    delay, patience = 0.1, 1.0  # the pause between attempts; an attempt's socket timeout
    warned, told_at = False, 0.0
    health = _health_file(config)
    while True:
        if health is not None:
            health.beat("starting")  # alive, not ready: a liveness probe holds meanwhile
        left = deadline - time.monotonic()
        error = _ping(config, min(patience, max(0.2, left)) if limit else 5.0)
        patience = min(patience * 2, 5.0)
        if error is None:
            if warned:
                log.info("Redis at %s is reachable now", config.safe_url)
            return True
        now = time.monotonic()
        if now >= deadline:
            log.error("Redis at %s is still unreachable after %gs (%s); giving up "
                      "(--start-timeout)", config.safe_url, limit, error)
            return False
        if not warned:
            warned, told_at = True, now
            log.warning("waiting for Redis at %s: unreachable (%s); trying for up to %gs "
                        "(--start-timeout)", config.safe_url, error, limit)
        elif now - told_at >= 10.0:
            told_at = now
            log.warning("still waiting for Redis at %s (%.0fs left)", config.safe_url,
                        deadline - now)
        time.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 2, 2.0)


def _health_file(config: WorkerConfig) -> HealthFile | None:
    """Return the health file the worker keeps (None: no --health-file)."""
    if not config.health_file:
        return None
    from django_qless.core.probe import HealthFile  # (loaded only when asked for)

    return HealthFile(config.health_file, config.name or default_worker_name())


def _ping(config: WorkerConfig, timeout: float) -> Exception | None:
    """Ping Redis once with `timeout`-second socket timeouts; return the error, if any."""
    client = None
    try:
        client = config.make_client(socket_timeout=timeout)
        for shard in client.clients()[:1]:  # a cluster: its transport knows every node
            shard.read(lambda r: r.ping(), attempts=1)
        return None
    except (QlessError, redis.RedisError, OSError) as exc:
        return exc
    finally:
        if client is not None:
            client.close()


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


def check_queue_specs(specs: Iterable[str]) -> None:
    """Refuse no queue, or a queue name or glob pattern the engine cannot serve (ValueError)."""
    given = " ".join(specs).replace(",", " ").split()
    if not given:
        raise ValueError("argument queues: no queues given")
    for spec in given:
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
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"argument --import: no module named {name!r}")


def check_health_file(path: str | None) -> None:
    """Refuse a --health-file whose directory does not exist or cannot be written to."""
    directory = os.path.dirname(os.path.abspath(path or "."))
    if path and not (os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK)):
        raise ValueError(f"argument --health-file: cannot write in {directory!r}")


def _check_url(url: str) -> None:
    """Refuse a Redis URL whose scheme redis-py does not know (never echo the URL)."""
    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "rediss", "unix"):
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
    if args.queues or not args.print_options:
        check_queue_specs(args.queues)
    exec_command = split_command(args.exec_command)
    check_imports(args.imports)
    check_health_file(args.health_file)
    if args.allow_module:
        default_registry.allow_module_prefixes(*args.allow_module)
    given = {**option_values(vars(args)), "exec_command": exec_command}
    values = {n: v for n, v in given.items() if n in WorkerConfig.__dataclass_fields__}
    return WorkerConfig(url=args.url, queues=tuple(args.queues), verbosity=args.verbose, **values)


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
    except (ImportError, QlessError) as exc:
        why = "cannot import job module: " if isinstance(exc, ImportError) else ""
        sys.stderr.write(f"qless-worker: {why}{exc}\n")
        return ExitCode.ERROR
