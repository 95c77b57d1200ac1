"""``manage.py qless <action>``: operate queues and jobs from the shell (``--json`` for scripts).

Actions: put, get, list, cancel, retry, move, priority, track, untrack, failed, stats,
config (get/set/unset), pause, unpause, throttle (get/set), schedules (list, --sync, --run),
rate-limit (get/set/clear),
move-queue (to another shard).

On a sharded alias every queue action goes to the queue's shard, a jid is looked up in every
shard, listings merge the shards (``stats`` gains a shard column), and config and throttle
changes apply to every shard.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_qless import shard_reads
from django_qless.conf import DEFAULT_ALIAS
from django_qless.core.client import Client
from django_qless.core.job import Job
from django_qless.core.types import AnyJob, QlessClient
from django_qless.management.commands._qless_args import add_arguments

__all__ = ["Command", "job_dict"]

def job_dict(job: Job) -> dict[str, Any]:
    """Return a job as plain data for output."""
    return {
        "jid": job.jid, "klass": job.klass_name, "queue": job.queue_name, "state": job.state,
        "priority": job.priority, "tags": list(job.tags), "worker": job.worker_name,
        "retries": job.retries, "original_retries": job.original_retries, "data": job.data,
        "failure": job.failure, "tracked": job.tracked, "dependencies": job.dependencies,
        "dependents": job.dependents, "history": job.history,
    }


def _csv(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _json_option(option: str, text: str, kind: type) -> Any:
    """Decode a JSON option that must be a list or an object, naming the option."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option}: invalid JSON: {exc}") from None
    except RecursionError:
        raise CommandError(f"{option}: invalid JSON: nested too deeply") from None
    if not isinstance(value, kind):
        what = "a JSON object" if kind is dict else "a JSON list"
        raise CommandError(f"{option} must be {what}, got {type(value).__name__}")
    return value


def _check_queues(queues: list[str]) -> None:
    """Refuse the whole command if any queue name is invalid (nothing done by halves)."""
    from django_qless.core.serialization import check_name

    for queue in queues:
        check_name("queue", queue)


def _check_function_arguments(klass: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Check --args/--kwargs against a @job function's signature, as ``.enqueue()`` does."""
    from django_qless.decorators import JobFunction
    from django_qless.options import encode_arguments
    from django_qless.registry import get_registry

    target = getattr(get_registry().resolve(klass).target, "__self__", None)
    if not isinstance(target, JobFunction):
        return  # a job class reads its data as it likes
    try:
        encode_arguments(klass, target.signature, args, kwargs)
    except TypeError as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    """The operator CLI."""

    help = "Inspect and operate qless queues and jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the actions and their options (_qless_args.py)."""
        add_arguments(parser)

    # -- plumbing ---------------------------------------------------------------------------

    def alias_client(self, queue: str | None = None) -> QlessClient:
        """Return the client of --alias, else of the queue's route, else of the default
        (a ShardedClient for a sharded alias)."""
        from django_qless.clients import get_client
        from django_qless.conf import get_settings

        alias = self.options["alias"] or (
            get_settings().alias_for_queue(queue) if queue else DEFAULT_ALIAS)
        return get_client(alias)

    def client(self, queue: str) -> Client:
        """Return the client holding `queue` (its shard's on a sharded alias)."""
        return self.alias_client(queue).for_queue(queue)

    def shards(self) -> list[Client]:
        """Return every shard's client of the alias (the one client when not sharded)."""
        return list(self.alias_client().clients())

    def find(self, jid: str) -> AnyJob | None:
        """Return the job or recurring job `jid`, from whichever shard holds it."""
        from django_qless.core.serialization import check_jid

        return self.alias_client().find_job(check_jid(jid))

    def job(self, jid: str) -> Job:
        """Return a job (bound to its shard's client) or raise CommandError."""
        job = self.find(jid)
        if not isinstance(job, Job):
            raise CommandError(f"no job {jid}")
        return job

    def emit(self, data: Any, text: str | None = None) -> None:
        """Print JSON with --json, else the text (or a JSON rendering)."""
        if self.options["json"] or text is None:
            self.stdout.write(json.dumps(data, indent=None if self.options["json"] else 2,
                                         sort_keys=True, default=str))
        else:
            self.stdout.write(text)

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch to the action."""
        from django.core.exceptions import ImproperlyConfigured

        from django_qless.core.exceptions import QlessError

        self.options = options
        try:
            getattr(self, f"do_{options['action'].replace('-', '_')}")()
        except QlessError as exc:
            raise CommandError(f"{type(exc).__name__}: {exc}") from exc
        except ImproperlyConfigured as exc:
            # An unknown --alias or invalid QLESS: a usage error, one line, exit 2.
            raise CommandError(str(exc), returncode=2) from None

    # -- actions ----------------------------------------------------------------------------

    def do_put(self) -> None:
        from django_qless.registry import get_registry

        o = self.options
        if not get_registry().is_allowed(o["klass"]):
            raise CommandError(f"{o['klass']!r} is not a registered job (decorate it with "
                               "@job or list its module in QLESS['JOB_MODULES'])")
        data = _json_option("--data", o["data"], dict)
        if o["job_args"] is not None or o["job_kwargs"] is not None:
            if data:
                raise CommandError("--data cannot be combined with --args/--kwargs (they "
                                   "build the data of a @job function)")
            data = {"args": _json_option("--args", o["job_args"] or "[]", list),
                    "kwargs": _json_option("--kwargs", o["job_kwargs"] or "{}", dict)}
            _check_function_arguments(o["klass"], data["args"], data["kwargs"])
        jid = self.client(o["queue"]).queues[o["queue"]].put(
            o["klass"], data, jid=o["jid"], priority=o["priority"], tags=_csv(o["tags"]),
            delay=o["delay"], retries=o["retries"], depends=_csv(o["depends"]),
            throttles=_csv(o["throttles"]))
        self.emit({"jid": jid}, jid)

    def do_get(self) -> None:
        self.emit(job_dict(self.job(self.options["jid"])))

    def _list_failed_matching(self, client: Client) -> None:
        """List a failure group's jobs in a queue and/or time window; --offset is a cursor."""
        o = self.options
        reply = client.jobs.failed_matching(o["group"], queue=o["queue"], since=o["since"],
                                            until=o["until"], cursor=o["offset"],
                                            count=o["count"])
        jids = [job.jid for job in reply["jobs"]]
        self.emit({"jids": jids, "total": None, "next": reply["next"]}, "\n".join(jids))
        if reply["next"] is not None and not o["json"]:
            self.stderr.write(f"more: --offset {reply['next']}")

    def do_list(self) -> None:
        o = self.options
        if o["state"] != "failed" and (o["since"] is not None or o["until"] is not None):
            raise CommandError("--since/--until apply to --state failed only")
        shards = self.alias_client(o["queue"]).clients()
        if o["queue"] and (o["tag"] or o["state"] == "complete"):
            # Tags and completed jobs are listed across queues: the engine keeps one list of
            # each, and a completed job is in no queue. Say so rather than ignore the queue.
            what = f"--tag {o['tag']}" if o["tag"] else "--state complete"
            raise CommandError(f"list {what} lists every queue's jobs (the engine keeps no "
                               f"list of them per queue): drop the queue {o['queue']!r}")
        if o["tag"]:
            reply = shard_reads.tagged(shards, o["tag"], o["offset"], o["count"])
            jids, total = reply["jobs"], reply["total"]
        elif o["state"] == "failed":
            if not o["group"]:
                raise CommandError("list --state failed needs --group (see `qless failed`)")
            if o["queue"]:
                self._list_failed_matching(self.client(o["queue"]))
                return
            if o["since"] is not None or o["until"] is not None:
                if len(shards) > 1:
                    raise CommandError("on a sharded alias, list --state failed with "
                                       "--since/--until needs a queue")
                self._list_failed_matching(shards[0])
                return
            reply = shard_reads.failed_jobs(shards, o["group"], o["offset"], o["count"])
            jids, total = [j.jid for j in reply["jobs"]], reply["total"]
        elif o["state"] == "complete":
            jids = shard_reads.complete(shards, o["offset"], o["count"])
            total = None
        else:
            if not o["queue"]:
                raise CommandError(f"list --state {o['state']} needs a queue")
            queue = self.client(o["queue"]).queues[o["queue"]]
            jids = getattr(queue.jobs, o["state"])(o["offset"], o["count"])
            total = None
        self.emit({"jids": jids, "total": total}, "\n".join(jids))

    def do_cancel(self) -> None:
        from django_qless.core.job import Job
        from django_qless.core.serialization import check_jids

        by_shard: dict[int, tuple[Any, list[str]]] = {}
        recurring: list[Any] = []
        # Every jid must exist before anything is canceled; a recurring jid is stopped.
        for jid in dict.fromkeys(check_jids(self.options["jids"])):
            found = self.find(jid)
            if found is None:
                raise CommandError(f"no job {jid}")
            if isinstance(found, Job):
                by_shard.setdefault(id(found.client), (found.client, []))[1].append(jid)
            else:
                recurring.append(found)
        # One engine call per shard: all of a shard canceled, or (e.g. a dependent left
        # out) none of it.
        canceled: list[str] = []
        for client, jids in by_shard.values():
            canceled.extend(client.jobs.cancel(*jids))
        for template in recurring:
            template.cancel()
        recurring = [template.jid for template in recurring]
        self.emit({"canceled": canceled, "recurring": recurring},
                  "\n".join([*canceled, *(f"{jid} (recurring, stopped)" for jid in recurring)]))

    def do_retry(self) -> None:
        o = self.options
        if o["group"]:
            if not o["queue"]:
                raise CommandError("retry --group needs --queue")
            if o["priority"] is not None:
                raise CommandError("retry --priority needs jids (a group keeps its priorities)")
            count = self.client(o["queue"]).queues[o["queue"]].unfail(o["group"], o["count"])
            self.emit({"retried": count}, f"{count} job{'' if count == 1 else 's'} requeued")
            return
        if not o["jids"]:
            raise CommandError("retry needs jids or --group")
        found = [self.job(jid) for jid in dict.fromkeys(o["jids"])]
        for job in found:  # check them all before requeueing any
            if job.state != "failed":
                raise CommandError(f"job {job.jid} is {job.state}, not failed")
        if o["priority"] is not None:
            from django_qless.core.serialization import PRIORITY_MAX, PRIORITY_MIN, check_int

            check_int("--priority", o["priority"], PRIORITY_MIN, PRIORITY_MAX)
        done = []
        for job in found:
            job.requeue(priority=o["priority"])
            done.append(job.jid)
        self.emit({"retried": done}, "\n".join(done))

    def do_move(self) -> None:
        job = self.job(self.options["jid"])
        target = self.client(self.options["queue"])
        if target is not job.client:
            raise CommandError(f"queue {self.options['queue']!r} is on shard {target.shard}, "
                               f"job {job.jid} on shard {job.client.shard}: a job cannot move "
                               "between shards")
        jid = job.move(self.options["queue"])
        self.emit({"jid": jid, "queue": self.options["queue"]}, f"{jid} -> {self.options['queue']}")

    def do_priority(self) -> None:
        value = self.job(self.options["jid"]).set_priority(self.options["priority"])
        self.emit({"jid": self.options["jid"], "priority": value}, str(value))

    def do_track(self) -> None:
        self.job(self.options["jid"]).track()
        self.emit({"tracked": self.options["jid"]}, f"tracking {self.options['jid']}")

    def do_untrack(self) -> None:
        self.job(self.options["jid"]).untrack()
        self.emit({"untracked": self.options["jid"]}, f"untracked {self.options['jid']}")

    def do_failed(self) -> None:
        o = self.options
        if o["group"]:
            reply = shard_reads.failed_jobs(self.shards(), o["group"], o["offset"], o["count"])
            jobs = [{"jid": j.jid, "queue": j.queue_name, "klass": j.klass_name,
                     "message": str((j.failure or {}).get("message", ""))[:200]}
                    for j in reply["jobs"]]
            self.emit({"total": reply["total"], "jobs": jobs},
                      "\n".join(f"{j['jid']} {j['queue']} {j['klass']}" for j in jobs))
        else:
            groups = shard_reads.failed_groups(self.shards())
            self.emit(groups, "\n".join(f"{n:6d}  {g}" for g, n in sorted(
                groups.items(), key=lambda kv: -kv[1])))

    def do_stats(self) -> None:
        queue = self.options["queue"]
        if queue:
            client = self.client(queue)
            counts = [client.queues[queue].counts]
            if client.shard is not None:
                counts = [{**counts[0], "shard": client.shard}]
        else:
            counts = shard_reads.counts(self.shards())
        # A sharded alias shows each queue's shard in a first column.
        lines = [(f"{c['shard']:10s} " if "shard" in c else "") + f"{c['name']:20s} " + " ".join(
            f"{k}={c.get(k, 0)}" for k in ("waiting", "running", "scheduled", "stalled",
                                             "depends", "recurring")) for c in counts]
        self.emit(counts, "\n".join(lines))

    def do_schedules(self) -> None:
        from django_qless.conf import get_settings
        from django_qless.schedules import schedule_rows, sync_schedules

        alias = self.options["alias"]
        aliases = [alias] if alias else list(get_settings().aliases)
        if self.options["sync"]:
            from django.core.exceptions import ImproperlyConfigured

            try:
                reports = sync_schedules(aliases)
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from None
            for name, report in reports.items():
                self.stderr.write(f"{name}: created {len(report.created)}, changed "
                                  f"{len(report.changed)}, removed {len(report.removed)}")
        if self.options["run"]:
            jid = self.alias_client().schedules.run_now(self.options["run"])
            self.emit({"jid": jid}, jid)
            return
        rows = schedule_rows(aliases)
        self.emit(rows, "\n".join(
            f"{r['name']:24s} {r['cron']:16s} {r['timezone']:16s} {r['queue']:12s} "
            f"next {r['upcoming'][0] if r['upcoming'] else '-'}  runs {r['count']}"
            for r in rows) or "no cron schedules")

    def do_config(self) -> None:
        o = self.options
        shards = self.shards()  # each shard has its own config: a change goes to all
        if o["op"] == "get":
            self.emit(shard_reads.config_values(
                shards, lambda c: c.config.all if o["key"] is None else c.config.get(o["key"])))
        elif o["op"] == "set":
            if o["key"] is None or o["value"] is None:
                raise CommandError("config set needs KEY VALUE")
            for client in shards:
                client.config[o["key"]] = o["value"]
            value = shard_reads.config_values(shards, lambda c: c.config.get(o["key"]))
            self.emit({o["key"]: value}, f"{o['key']} = {value}")
        else:
            if o["key"] is None:
                raise CommandError("config unset needs KEY")
            for client in shards:
                del client.config[o["key"]]
            self.emit({"unset": o["key"]}, f"unset {o['key']}")

    def do_pause(self) -> None:
        _check_queues(self.options["queues"])
        for queue in self.options["queues"]:
            self.client(queue).queues[queue].pause()
        self.emit({"paused": self.options["queues"]}, "paused " + " ".join(self.options["queues"]))

    def do_unpause(self) -> None:
        _check_queues(self.options["queues"])
        for queue in self.options["queues"]:
            self.client(queue).queues[queue].unpause()
        self.emit({"unpaused": self.options["queues"]},
                  "unpaused " + " ".join(self.options["queues"]))

    def do_throttle(self) -> None:
        from django_qless.core.exceptions import InvalidArgument

        o = self.options
        try:  # a named throttle lives in one shard on a sharded alias: its home
            client = self.alias_client().throttle_client(o["tid"], queue=o["queue"])
        except InvalidArgument as exc:
            raise CommandError(str(exc)) from None
        if o["op"] == "set":
            if o["maximum"] is None:
                raise CommandError("throttle set needs TID MAXIMUM")
            client.throttles[o["tid"]].set(o["maximum"], o["ttl"])
        info = dict(client.throttles[o["tid"]].info())
        where = ""
        if client.shard is not None:
            info["shard"] = client.shard
            where = f" (shard {client.shard})"
        self.emit(info, f"{o['tid']}: maximum={info.get('maximum')} ttl={info.get('ttl')}{where}")

    def do_rate_limit(self) -> None:
        from django_qless.core.serialization import check_name

        o = self.options
        scope: Literal["queue", "kind"] = "kind" if o["kind"] else "queue"
        if scope == "queue":
            check_name("queue", o["name"])
            client = self.client(o["name"])
        elif o["queue"] is not None:
            check_name("queue", o["queue"])
            client = self.client(o["queue"])
        else:
            shards = self.shards()
            if len(shards) > 1:
                raise CommandError("rate-limit --kind on a sharded alias needs --queue: a kind's "
                                   "limit counts the jobs of one shard")
            client = shards[0]
        limits = client.rate_limits
        if o["op"] == "set":
            if o["rate"] is None:
                raise CommandError("rate-limit set needs NAME RATE (like 100/m)")
            limits.set(scope, o["name"], o["rate"], key=o["key"])
        elif o["op"] == "clear":
            limits.delete(scope, o["name"])
        status = limits.get(scope, o["name"])
        if status is None:
            self.emit({"scope": scope, "name": o["name"], "rate": None},
                      f"{scope} {o['name']}: no rate limit")
            return
        info = {"scope": scope, "name": o["name"], "rate": status.rate, "key": status.key,
                "used": status.used, "opens_in": status.opens_in, "keys": status.keys,
                "limited": status.limited}
        per = f" per {status.key}" if status.key else ""
        self.emit(info, f"{scope} {o['name']}: {status.rate}{per}, {status.used} of "
                        f"{status.limit} used in the window, {status.limited} waiting")

    def do_empty_queue(self) -> None:
        from django_qless.core.console.queue_admin import EmptyCursor

        o = self.options
        _check_queues([o["queue"]])
        name, shards = o["queue"], self.shards()
        if not o["yes"]:
            counts: dict[str, int] = {}
            for client in shards:
                for state, n in client.queues[name].contents().counts.items():
                    counts[state] = counts.get(state, 0) + n
            shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "nothing"
            self.emit({"would_remove": counts},
                      f"queue {name} holds {shown}; add --yes to cancel it all")
            raise CommandError("nothing was changed (add --yes)")
        totals: dict[str, int] = {}
        kept: dict[str, str] = {}
        for client in shards:
            cursor = EmptyCursor(kept=kept)
            while True:
                step = client.queues[name].empty(cursor=cursor)
                for state, n in step.canceled.items():
                    totals[state] = totals.get(state, 0) + n
                totals["recurring"] = totals.get("recurring", 0) + step.unrecurred
                cursor = step.cursor
                if step.done:
                    break
            kept = cursor.kept
        deleted = bool(o["delete"]) and not kept
        if deleted:
            for client in shards:
                client.queues[name].forget()
        for jid, why in kept.items():
            self.stderr.write(f"kept {jid}: {why}")
        done = ", ".join(f"{n} {s}" for s, n in totals.items() if n) or "nothing"
        self.emit({"removed": totals, "kept": kept, "deleted": deleted},
                  f"{'deleted' if deleted else 'emptied'} queue {name}: removed {done}")

    def do_move_queue(self) -> None:
        from django_qless.core.cluster.queue_move import QueueMove
        from django_qless.core.cluster.sharded import ShardedClient

        o, sharded = self.options, self.alias_client(self.options["queue"])
        if not isinstance(sharded, ShardedClient):
            raise CommandError("move-queue needs a sharded (CLUSTER) alias")
        queue = o["queue"]
        placement = sharded.placement
        if not (queue in placement.explicit or queue in placement.recorded()
                or any(queue in c.queues.names() for c in sharded.clients())):
            # (moving it would record a placement for a queue nobody uses)
            raise CommandError(f"no queue {queue!r} on any shard (no jobs, no placement): "
                               f"nothing to move", returncode=2)
        done = QueueMove(sharded, o["queue"], o["shard"],
                         report=lambda p: self.stderr.write(p.line())).run()
        where = sharded.shard_of(o["queue"])
        self.emit([vars(p) for p in done], f"{o['queue']} is in shard {where}")
