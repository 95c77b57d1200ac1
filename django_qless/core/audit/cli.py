"""Command line: `python -m django_qless.core.audit --url URL [--fix] [--json]`, or
`--cluster URL[,URL...] --shards N` for every shard of a sharded deployment.

Prints the same report as `manage.py qless_audit`: one per shard on a cluster. Exit codes:
0 no violation (left, with --fix) in any shard; 1 violations remain; 2 nothing was audited:
bad options, or Redis could not be reached or refused a command (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO
from urllib.parse import urlsplit

import redis
from redis.exceptions import RedisClusterException

from ..exceptions import QlessError
from .auditor import AuditReport, audit, audit_all, counted

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_VIOLATIONS", "build_parser", "main", "render",
           "render_all", "short_error"]

EXIT_CLEAN = 0
EXIT_VIOLATIONS = 1
EXIT_ERROR = 2
_SCHEMES = ("redis", "rediss", "unix")


def render(report: AuditReport, as_json: bool) -> str:
    """Return the report as text, or as JSON with ``as_json``."""
    if as_json:
        return json.dumps(report.as_dict(), indent=2, sort_keys=True)
    return str(report)


def render_all(reports: Sequence[AuditReport], as_json: bool) -> str:
    """Return the reports of a deployment's keyspaces: one report as `render`; several (one
    per shard) as text one after the other with a summary line, or as JSON
    `{"ok": ..., "shards": {tag: report}}`."""
    if len(reports) == 1:
        return render(reports[0], as_json)
    ok = all(report.ok for report in reports)
    if as_json:
        return json.dumps({"ok": ok, "shards": {str(r.shard): r.as_dict() for r in reports}},
                          indent=2, sort_keys=True)
    broken = [str(r.shard) for r in reports if not r.ok]
    shards = counted(len(reports), "shard")
    summary = f"{shards}, all clean" if ok else f"{shards}, violations in {', '.join(broken)}"
    return "\n".join([*(str(r) for r in reports), summary])


def short_error(exc: BaseException) -> str:
    """Return the first line of an error, with its type when the text is empty."""
    text = str(exc).strip().splitlines()
    return text[0] if text and text[0] else type(exc).__name__


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m django_qless.core.audit",
        description="Check that every qless job and index agree; --fix repairs what is safe.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", default=os.environ.get("QLESS_URL", "redis://localhost:6379/0"),
                   help="Redis URL (default $QLESS_URL or redis://localhost:6379/0)")
    p.add_argument("--cluster", metavar="URLS",
                   help="audit every shard of a Redis Cluster deployment instead: node URLs, "
                        "comma-separated")
    p.add_argument("--shards", type=int, default=16, metavar="N",
                   help="the deployment's number of shards, with --cluster (default 16)")
    p.add_argument("--fix", action="store_true",
                   help="repair ghosts, indexes, edges, counters and throttle slots")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--connect-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="give up connecting after this long (default 5)")
    return p


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run the auditor from the command line; return the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cluster is not None:
        return _main_cluster(parser, args, out, err)
    scheme = urlsplit(args.url).scheme
    if scheme not in _SCHEMES:
        # Never echo the URL: it may carry a password.
        parser.print_usage(err)
        err.write(f"{parser.prog}: error: argument --url: must start with redis://, "
                  f"rediss:// or unix://, got scheme {scheme[:20]!r}\n")
        return EXIT_ERROR
    try:
        conn = redis.Redis.from_url(args.url, decode_responses=True,
                                    socket_connect_timeout=args.connect_timeout)
    except ValueError as exc:
        parser.print_usage(err)
        err.write(f"{parser.prog}: error: argument --url: {short_error(exc)}\n")
        return EXIT_ERROR
    try:
        report = audit(conn, fix=args.fix)
    except redis.RedisError as exc:
        err.write(f"{parser.prog}: error: cannot audit: {short_error(exc)}\n")
        return EXIT_ERROR
    finally:
        conn.close()
    out.write(render(report, args.json) + "\n")
    return EXIT_CLEAN if report.ok else EXIT_VIOLATIONS


def _main_cluster(parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO,
                  err: TextIO) -> int:
    """Audit every shard of the deployment on `--cluster`; return the exit code."""
    from ..cluster.sharded import ShardedClient

    urls = [url.strip() for url in args.cluster.split(",") if url.strip()]
    bad = [url for url in urls if urlsplit(url).scheme not in ("redis", "rediss")]
    if not urls or bad or args.shards < 1:
        parser.print_usage(err)
        err.write(f"{parser.prog}: error: argument --cluster: give redis:// or rediss:// node "
                  f"URLs, and --shards of at least 1\n")
        return EXIT_ERROR
    try:
        deployment = ShardedClient(urls, shards=args.shards,
                                   socket_timeout=args.connect_timeout)
    except (redis.RedisError, RedisClusterException, QlessError, ValueError) as exc:
        err.write(f"{parser.prog}: error: cannot audit: {short_error(exc)}\n")
        return EXIT_ERROR
    try:
        reports = audit_all(deployment, fix=args.fix)
    except (redis.RedisError, RedisClusterException, QlessError) as exc:
        err.write(f"{parser.prog}: error: cannot audit: {short_error(exc)}\n")
        return EXIT_ERROR
    finally:
        deployment.close()
    out.write(render_all(reports, args.json) + "\n")
    return EXIT_CLEAN if all(report.ok for report in reports) else EXIT_VIOLATIONS
