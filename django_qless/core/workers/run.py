"""Build and run a worker from a `WorkerConfig` (shared by the CLI and the Django command)."""

from __future__ import annotations

import importlib
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, TextIO

import redis

from django_qless.core.exceptions import QlessError
from django_qless.core.health import check_eviction, clock_skew
from django_qless.core.workers.hooks import WorkerHooksProtocol
from django_qless.core.workers.reservers import QueueSelection
from django_qless.core.workers.shards import known_queues
from django_qless.core.workers.shutdown import ExitCode
from django_qless.core.workers.worker_config import WorkerConfig

if TYPE_CHECKING:
    from django_qless.core.workers.forking import ForkingWorker
    from django_qless.core.workers.serial import SerialWorker

__all__ = [
    "dry_run",
    "import_modules",
    "make_worker",
    "run_worker",
    "wait_for_redis",
    "warn_about_eviction",
]

log = logging.getLogger("django_qless.worker")


def import_modules(names: tuple[str, ...]) -> None:
    """Import job modules (they register their jobs) before any fork."""
    for name in names:
        importlib.import_module(name)


def make_worker(
    config: WorkerConfig, hooks: WorkerHooksProtocol | None = None
) -> SerialWorker | ForkingWorker:
    """Return a SerialWorker (processes=0) or a ForkingWorker."""
    # Each kind loads only its own modules (a serial worker imports nothing about forking).
    if config.serial:
        from django_qless.core.workers.serial import SerialWorker

        return SerialWorker(config, hooks)
    from django_qless.core.workers.forking import ForkingWorker

    return ForkingWorker(config, hooks)


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
    mode = "serial" if config.serial else f"forking, {config.process_count} children"
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
    if not wait_for_redis(config):
        return ExitCode.ERROR
    warn_about_eviction(config)
    return make_worker(config, hooks).run_forever()


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
