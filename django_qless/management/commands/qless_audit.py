"""``manage.py qless_audit``: check the queue invariants (and repair with ``--fix``).

A sharded alias is audited shard by shard (one report each, then a summary line). Exit
codes, as ``python -m django_qless.core.audit``: 0 clean (every shard), 1 when violations
remain (after repairs, with ``--fix``), so cron and CI can alert, 2 when nothing could be
audited (unknown alias, Redis unreachable): one line on stderr, no traceback.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_qless.settings import DEFAULT_ALIAS

__all__ = ["Command"]


class Command(BaseCommand):
    """Run the invariant auditor on one alias."""

    help = "Check that every qless job and index agree; --fix repairs what is safe."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--alias", "--client", default=DEFAULT_ALIAS,
                            help="QLESS alias to audit (default: 'default')")
        parser.add_argument("--fix", action="store_true",
                            help="repair ghosts, indexes, edges, counters and throttle slots")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        """Audit, print the report, exit 1 if violations remain."""
        from django_qless.clients import get_client
        from django_qless.core.audit import audit_all
        from django_qless.core.audit.cli import (
            EXIT_ERROR,
            EXIT_VIOLATIONS,
            render_all,
            short_error,
        )
        from django_qless.core.exceptions import CALL_ERRORS
        from django_qless.settings import get_settings

        alias = options["alias"]
        aliases = get_settings().aliases
        if alias not in aliases:
            raise CommandError(f"unknown QLESS alias {alias!r} (known: "
                               f"{', '.join(sorted(aliases))})", returncode=EXIT_ERROR)
        try:
            reports = audit_all(get_client(alias), fix=options["fix"])
        except CALL_ERRORS as exc:
            raise CommandError(f"cannot audit alias {alias!r} ({aliases[alias].display}): "
                               f"{short_error(exc)}", returncode=EXIT_ERROR) from None
        self.stdout.write(render_all(reports, options["json"]))
        if not all(report.ok for report in reports):
            sys.exit(EXIT_VIOLATIONS)
