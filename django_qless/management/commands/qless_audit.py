"""``manage.py qless_audit``: check the queue invariants (and repair with ``--fix``).

Exit code 1 when violations remain (after repairs, with ``--fix``), so cron and CI can alert.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_qless.conf import DEFAULT_ALIAS

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

        report = audit(get_client(options["alias"]), fix=options["fix"])
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        else:
            self.stdout.write(str(report))
        if not report.ok:
            sys.exit(1)
