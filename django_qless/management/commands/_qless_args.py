"""The actions and options of ``manage.py qless`` (its argument parser)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_qless.core.worker_options import integer, non_negative_int, number

__all__ = ["STATES", "add_arguments"]

STATES = ("waiting", "running", "scheduled", "stalled", "depends", "recurring", "throttled",
          "failed", "complete")


def _moment(*, until: bool) -> Any:
    """Return an argparse type reading a time (epoch seconds, a day or an ISO datetime)."""
    import argparse

    def parse(text: str) -> float:
        from django_qless.forms import parse_moment

        try:
            return parse_moment(text, until=until)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "time"
    return parse


def _add_django_options(parser: CommandParser) -> None:
    """Accept Django's own options after the action too (``qless stats --settings X``).

    They default to SUPPRESS, so an action's parser sets them only when they are given
    there and never hides the value given before the action.
    """
    import argparse

    quiet: dict[str, Any] = {"default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
    parser.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], **quiet)
    parser.add_argument("--settings", **quiet)
    parser.add_argument("--pythonpath", **quiet)
    for flag in ("--traceback", "--no-color", "--force-color", "--skip-checks"):
        parser.add_argument(flag, action="store_true", **quiet)


def add_arguments(parser: CommandParser) -> None:
    """Declare the actions and their options on `parser`."""
    common = CommandParser(add_help=False)
    common.add_argument("--alias", "--client", default=None,
                        help="QLESS alias (default: routed by queue, else 'default')")
    common.add_argument("--json", action="store_true", help="print JSON")
    _add_django_options(common)
    sub = parser.add_subparsers(dest="action", required=True)
    original = sub.add_parser

    def add_parser(name: str, **kwargs: Any) -> Any:
        return original(name, parents=[common], **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]
    put = sub.add_parser("put", help="put a job of a registered klass")
    put.add_argument("queue")
    put.add_argument("klass")
    put.add_argument("--data", default="{}", help="JSON object")
    put.add_argument("--args", dest="job_args", default=None,
                     help="JSON list (for @job functions)")
    put.add_argument("--kwargs", dest="job_kwargs", default=None,
                     help="JSON object (for @job functions)")
    put.add_argument("--priority", type=integer, default=0)
    put.add_argument("--tags", default="")
    put.add_argument("--delay", type=number, default=0)
    put.add_argument("--retries", type=integer, default=5)
    put.add_argument("--depends", default="")
    put.add_argument("--throttles", default="")
    put.add_argument("--jid", default=None)
    sub.add_parser("get", help="show a job").add_argument("jid")
    lst = sub.add_parser("list", help="list jids by queue and state, or by tag")
    lst.add_argument("queue", nargs="?")
    lst.add_argument("--state", choices=STATES, default="waiting")
    lst.add_argument("--tag", default=None)
    lst.add_argument("--group", default=None, help="failure group (with --state failed)")
    lst.add_argument("--since", type=_moment(until=False), default=None,
                     help="with --state failed: failed at or after (epoch seconds, "
                          "YYYY-MM-DD or an ISO datetime)")
    lst.add_argument("--until", type=_moment(until=True), default=None,
                     help="with --state failed: failed before (a day is included)")
    lst.add_argument("--offset", type=non_negative_int, default=0)
    lst.add_argument("--count", type=non_negative_int, default=25)
    sub.add_parser("cancel", help="cancel jobs").add_argument("jids", nargs="+")
    retry = sub.add_parser("retry", help="requeue failed jobs, or a whole failure group")
    retry.add_argument("jids", nargs="*")
    retry.add_argument("--group", default=None)
    retry.add_argument("--queue", default=None, help="queue of the group (--group)")
    retry.add_argument("--count", type=non_negative_int, default=500)
    retry.add_argument("--priority", type=integer, default=None,
                       help="requeue the jobs at this priority (with jids)")
    move = sub.add_parser("move", help="move a job to another queue")
    move.add_argument("jid")
    move.add_argument("queue")
    pri = sub.add_parser("priority", help="set a job's priority")
    pri.add_argument("jid")
    pri.add_argument("priority", type=integer)
    sub.add_parser("track", help="track a job").add_argument("jid")
    sub.add_parser("untrack", help="stop tracking a job").add_argument("jid")
    failed = sub.add_parser("failed", help="failure groups, or the jobs of one")
    failed.add_argument("group", nargs="?")
    failed.add_argument("--offset", type=non_negative_int, default=0)
    failed.add_argument("--count", type=non_negative_int, default=25)
    sub.add_parser("stats", help="queue counts").add_argument("queue", nargs="?")
    config = sub.add_parser("config", help="qless config (get/set/unset)")
    config.add_argument("op", choices=("get", "set", "unset"))
    config.add_argument("key", nargs="?")
    config.add_argument("value", nargs="?")
    sub.add_parser("pause", help="pause queues").add_argument("queues", nargs="+")
    sub.add_parser("unpause", help="unpause queues").add_argument("queues", nargs="+")
    throttle = sub.add_parser("throttle", help="throttles (get/set)")
    throttle.add_argument("op", choices=("get", "set"))
    throttle.add_argument("tid")
    throttle.add_argument("maximum", nargs="?", type=non_negative_int)
    throttle.add_argument("--ttl", type=non_negative_int, default=0)
    throttle.add_argument("--queue", default=None,
                          help="sharded alias: home a throttle never used yet with the "
                               "shard of this queue")
    schedules = sub.add_parser("schedules", help="cron schedules: list, sync, run one now")
    schedules.add_argument("--sync", action="store_true",
                           help="register the declared schedules, remove undeclared ones")
    schedules.add_argument("--run", metavar="NAME", default=None, help="run one now")
    rate = sub.add_parser("rate-limit", help="a queue's or job kind's rate limit "
                                            "(get/set/clear)")
    rate.add_argument("op", choices=("get", "set", "clear"))
    rate.add_argument("name", help="the queue (or the job class, with --kind)")
    rate.add_argument("rate", nargs="?", help="N per period: 100/m, 10/s, 1000/h, 5/30s")
    rate.add_argument("--key", default=None,
                      help="one budget per value of this dotted path into the job data")
    rate.add_argument("--kind", action="store_true",
                      help="NAME is a job class: limit that kind of job")
    rate.add_argument("--queue", default=None,
                      help="with --kind on a sharded alias: the shard of this queue")
    empty = sub.add_parser("empty-queue",
                           help="cancel every job of a queue (and its recurring templates "
                                "and failed jobs) in batches of 500, on every shard")
    empty.add_argument("queue")
    empty.add_argument("--delete", action="store_true",
                       help="then forget the queue (unless jobs were kept)")
    empty.add_argument("--yes", action="store_true",
                       help="do it (without --yes, print what would go and change nothing)")
    move_queue = sub.add_parser("move-queue", help="move a queue to another shard online")
    move_queue.add_argument("queue")
    move_queue.add_argument("shard", help="the target shard: index, s<i> or tag")
