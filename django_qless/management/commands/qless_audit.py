"""``manage.py qless_audit``: check the queue invariants (and repair with ``--fix``).

Exit codes, as ``python -m django_qless.core.audit``: 0 clean, 1 when violations remain
(after repairs, with ``--fix``), so cron and CI can alert, 2 when nothing could be audited
(unknown alias, Redis unreachable): one line on stderr, no traceback.
"""

from __future__ import annotations

import json
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
        from django_qless.core.audit import audit
        from django_qless.core.audit_cli import EXIT_ERROR, EXIT_VIOLATIONS, render, short_error
        from django_qless.core.exceptions import CALL_ERRORS
        from django_qless.settings import get_settings

        alias = options["alias"]
        aliases = get_settings().aliases
        if alias not in aliases:
            raise CommandError(f"unknown QLESS alias {alias!r} (known: "
                               f"{', '.join(sorted(aliases))})", returncode=EXIT_ERROR)
        try:
            # Every shard of a sharded alias (the core audit may refuse a shard keyspace:
            # then nothing is audited, exit 2, as for an unreachable server).
            reports = [(client.shard, audit(client, fix=options["fix"]))
                       for client in get_client(alias).clients()]
        except CALL_ERRORS as exc:
            raise CommandError(f"cannot audit alias {alias!r} ({aliases[alias].display}): "
                               f"{short_error(exc)}", returncode=EXIT_ERROR) from None
        if len(reports) == 1:
            self.stdout.write(render(reports[0][1], options["json"]))
        elif options["json"]:
            self.stdout.write(json.dumps({str(shard): report.as_dict()
                                          for shard, report in reports}, indent=2))
        else:
            for shard, report in reports:
                self.stdout.write(f"shard {shard}:\n{render(report, False)}")
        if not all(report.ok for _, report in reports):
            sys.exit(EXIT_VIOLATIONS)
