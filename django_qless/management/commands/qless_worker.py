"""``manage.py qless_worker [queue ...]``: run the core worker with the Django hooks."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_qless.clients import build_client, build_redis
from django_qless.conf import AliasSettings, get_settings
from django_qless.core.worker_cli import check_queue_specs, stop_before_start, wait_for_redis
from django_qless.core.worker_options import WorkerConfig, add_options, option_values

if TYPE_CHECKING:
    from django_qless.core.registry import Registry
    from django_qless.core.types import QlessClient

__all__ = ["AliasWorkerConfig", "Command", "alias_connector", "with_timeout"]

WORKER_SOCKET_TIMEOUT = 30.0


def alias_connector(conf: AliasSettings) -> Callable[[], Any]:
    """Return a factory building the alias's connection: its redis.Redis (URL, TLS, ACL or
    Sentinel), or for a cluster alias its `ShardedClient` (the worker then serves queues in
    several shards).

    The worker calls it in every process after fork. Worker connections get a socket
    timeout even when the alias has none, so a half-open connection cannot hang a worker.
    """
    if conf.socket_timeout is None:
        conf = replace(conf, socket_timeout=WORKER_SOCKET_TIMEOUT)
    if conf.cluster is not None:
        return partial(build_client, conf)
    return partial(build_redis, conf)


def with_timeout(conf: AliasSettings, seconds: float) -> AliasSettings:
    """Return the alias's settings with every socket timeout set to `seconds` (the alias's
    OPTIONS included), for calls that must not wait longer."""
    bounded = {"socket_timeout": seconds, "socket_connect_timeout": seconds}
    sentinel = {**conf.sentinel_kwargs, **bounded} if conf.sentinels else conf.sentinel_kwargs
    return replace(conf, socket_timeout=seconds, options={**conf.options, **bounded},
                   sentinel_kwargs=sentinel)


@dataclass(frozen=True)
class AliasWorkerConfig(WorkerConfig):
    """A worker config built from a QLESS alias: logs name the alias and its masked URL."""

    alias: str = ""
    settings: AliasSettings | None = field(default=None, compare=False, repr=False)

    @property
    def safe_url(self) -> str:
        """Return the alias's credential-free URL and its name (for logs)."""
        return f"{self.url} (QLESS alias {self.alias!r})"

    def make_client(self, *, worker_name: str | None = None,
                    socket_timeout: float | None = -1.0) -> QlessClient:
        """Return a new client; a socket timeout given here bounds the alias's own."""
        if self.settings is None or socket_timeout is None or socket_timeout == -1.0:
            return super().make_client(worker_name=worker_name)
        connect = alias_connector(with_timeout(self.settings, socket_timeout))
        return WorkerConfig.make_client(replace(self, connect=connect), worker_name=worker_name)


def job_queues(registry: Registry) -> dict[str, str]:
    """Return the queue each registered @job function or class and django.tasks task is
    put in by default (other registered targets name no queue)."""
    found: dict[str, str] = {}
    for name in registry.names():
        target = registry.resolve(name).target
        # @job functions register their bound `process`, classes carry `qless_job`, tasks
        # are wrapped in a TaskJob.
        options = getattr(getattr(target, "__self__", None), "options", None) or getattr(
            getattr(target, "qless_job", None), "options", None)
        queue = getattr(options, "queue", None) or getattr(
            getattr(target, "task", None), "queue_name", None)
        if isinstance(queue, str):
            found[name] = queue
    return found


def config_error(message: str) -> CommandError:
    """Return a configuration error: exit code 2, so a supervisor does not restart in vain."""
    from django_qless.core.workers.shutdown import ExitCode

    return CommandError(message, returncode=int(ExitCode.USAGE))


class Command(BaseCommand):
    """Run a qless worker for the given queues (default: QLESS["WORKER"]["QUEUES"]).

    Exit codes as ``qless-worker``: 2 for any configuration error (bad options, invalid
    ``QLESS`` settings, failed system checks, unknown alias), 1 for a fatal error at run time
    (Redis unreachable, a job module that fails to import).
    """

    help = "Run a qless worker: reserve jobs from the queues and run them."

    def execute(self, *args: Any, **options: Any) -> Any:
        """Run the command; configuration errors (system checks included) exit with 2."""
        from django.core.exceptions import ImproperlyConfigured
        from django.core.management.base import SystemCheckError

        try:
            return super().execute(*args, **options)
        except SystemCheckError as exc:
            exc.returncode = config_error("").returncode
            raise
        except ImproperlyConfigured as exc:
            raise config_error(f"improperly configured: {exc}") from None

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*", help="queues (globs allowed) in priority order")
        parser.add_argument("--alias", "--client", default=None,
                            help="QLESS alias to work on (default: the first queue's route)")
        add_options(parser, django=True, aliases={"processes": ("-p",)})
        parser.add_argument("--with-events", action="store_true",
                            help="also bridge Redis events to Django signals (as qless_events "
                                 "does), in a process of its own")
        parser.add_argument("--pid", default=None, help="write the process id to this file")

    def build_config(self, options: dict[str, Any]) -> WorkerConfig:
        """Turn command options and QLESS settings into a core WorkerConfig."""
        from django_qless.core.worker_options import WorkerConfig
        from django_qless.registry import get_registry

        conf = get_settings()
        registry = get_registry()
        queues = tuple(options["queues"]) or conf.worker.queues
        try:
            check_queue_specs(queues)
        except ValueError as exc:
            raise config_error(str(exc)) from None
        alias = options["alias"] or conf.alias_for_queue(queues[0])
        self._alias = alias
        if alias not in conf.aliases:
            raise config_error(f"unknown QLESS alias {alias!r}")
        others = {conf.alias_for_queue(q) for q in queues if "*" not in q} - {alias}
        if others and not options["alias"]:
            raise config_error(
                f"queues {', '.join(queues)} are routed to several aliases ({alias}, "
                f"{', '.join(sorted(others))}); run one worker per alias with --alias.")
        # A command-line value wins; else QLESS["WORKER"]; else the option's default.
        merged = {**{n: v for n, v in conf.worker.values.items() if v is not None},
                  **option_values(options, django=True)}
        fields = WorkerConfig.__dataclass_fields__
        values = {n: v for n, v in merged.items() if n in fields and n != "queues"}
        try:
            return AliasWorkerConfig(
                alias=alias,
                url=conf.aliases[alias].display,
                connect=alias_connector(conf.aliases[alias]),
                settings=conf.aliases[alias],
                queues=queues,
                verbosity=options["verbosity"],
                registry=registry,
                job_queues=job_queues(registry),
                **values,
            )
        except ValueError as exc:
            raise config_error(str(exc)) from None

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the config, then run the worker until it stops."""
        from django_qless.core.workers import run_worker
        from django_qless.hooks import DjangoWorkerHooks

        # TERM, INT or QUIT before the worker handles them itself: exit 0, nothing taken.
        with stop_before_start():
            config = self.build_config(options)
            if options["print_options"]:
                self._print_options(config)
                return
            self._prepare(config, options)
            bridge = self._start_bridge(config) if options["with_events"] else None
            hooks = DjangoWorkerHooks(self._alias)
        try:
            code = run_worker(config, hooks, out=cast(TextIO, self.stdout))
        finally:
            if bridge is not None:
                self._stop_bridge(bridge)
        sys.exit(code)

    def _print_options(self, config: WorkerConfig) -> None:
        """Print the resolved options and the registered jobs as JSON."""
        import json

        data = config.as_dict()
        data["jobs"] = config.registry.names()
        data["url"] = config.url  # the alias's credential-free description
        self.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str))

    def _prepare(self, config: WorkerConfig, options: dict[str, Any]) -> None:
        """Log, write the pid file, wait for Redis, set the heartbeat, sync the schedules."""
        self._logging(options["verbosity"])
        if options["pid"]:
            with open(options["pid"], "w") as fh:
                fh.write(str(os.getpid()))
        # Before the heartbeat write and the event bridge, which need Redis too.
        if not options["dry_run"] and not wait_for_redis(config):
            sys.exit(1)
        if not options["dry_run"]:
            self._refuse_cluster_node()
        heartbeat = get_settings().worker.heartbeat
        if heartbeat is not None:
            from django_qless.core.exceptions import CALL_ERRORS

            try:
                deployment = config.make_client(socket_timeout=5.0)
                try:
                    for client in deployment.clients():  # every shard of a cluster alias
                        client.config["heartbeat"] = heartbeat
                finally:
                    deployment.close()
            except CALL_ERRORS as exc:
                raise CommandError(f"cannot set the heartbeat at {config.url}: {exc}") from None
        if not options["dry_run"]:
            self._sync_schedules()

    def _sync_schedules(self) -> None:
        """Register the declared cron schedules of this alias (unchanged: nothing written)."""
        from django.core.exceptions import ImproperlyConfigured

        from django_qless.core.exceptions import CALL_ERRORS
        from django_qless.schedules import sync_schedules

        try:
            sync_schedules([self._alias])
        except ImproperlyConfigured as exc:
            raise config_error(str(exc)) from None
        except CALL_ERRORS as exc:
            raise CommandError(f"cannot register the cron schedules: {exc}") from None

    def _refuse_cluster_node(self) -> None:
        """Exit 2 when a plain URL reaches a Redis Cluster node (every reserve would fail)."""
        from django_qless.checks import cluster_node_message
        from django_qless.clients import build_redis
        from django_qless.core.exceptions import CALL_ERRORS
        from django_qless.core.health import probe

        conf = get_settings().aliases[self._alias]
        if conf.cluster is not None:
            return
        conn = build_redis(replace(conf, socket_timeout=conf.socket_timeout or 5.0))
        try:
            found = probe(conn)
        except CALL_ERRORS:
            return  # the worker's own start says what is wrong with the server
        finally:
            conn.close()
        if found.cluster_node:
            raise config_error(cluster_node_message(self._alias, conf))

    def _start_bridge(self, config: WorkerConfig) -> int:
        """Fork the event bridge before the worker starts any thread; return once it listens."""
        from django.db import connections

        from django_qless.bridge import serve
        from django_qless.core.workers.child import set_parent_death_signal
        from django_qless.core.workers.shutdown import reset_child_signals

        connections.close_all()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid:
            os.close(write_fd)
            # Wait until it is subscribed, so no event of this worker's first job is missed.
            with os.fdopen(read_fd, "rb") as pipe:
                if pipe.read(1) != b"1":
                    raise CommandError("the event bridge did not start (see its log)")
            return pid
        os.close(read_fd)
        reset_child_signals()  # not the start-up's handlers: serve() sets its own
        code = 1
        try:
            set_parent_death_signal(signal.SIGTERM)  # never outlive the worker

            def listening() -> None:
                os.write(write_fd, b"1")
                os.close(write_fd)

            serve(self._alias, ready=listening)
            code = 0
        except BaseException:
            logging.getLogger("django_qless").exception("the event bridge stopped")
        finally:
            os._exit(code)

    def _stop_bridge(self, pid: int) -> None:
        """Stop the event bridge and reap it."""
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def _logging(self, verbosity: int) -> None:
        """Show worker logs on stderr unless the project configured these loggers."""
        level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
        loggers = [logging.getLogger(n) for n in ("django_qless", "django_qless.worker")]
        if any(logger.handlers for logger in loggers):
            return  # LOGGING in settings decides (the command is the app, but yours wins)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"))
        loggers[0].addHandler(handler)
        loggers[0].setLevel(level)
