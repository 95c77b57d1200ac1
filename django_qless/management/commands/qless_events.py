"""``manage.py qless_events``: bridge qless pubsub events to Django signals until stopped."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.template.defaultfilters import pluralize

from django_qless.conf import DEFAULT_ALIAS

__all__ = ["Command"]


class Command(BaseCommand):
    """Listen to one alias's events and send job_* signals (receivers run here)."""

    help = "Bridge qless pubsub events to Django signals (job_completed, job_failed, ...)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--alias", "--client", default=DEFAULT_ALIAS)
        parser.add_argument("--events", default=None,
                            help="comma-separated event names to bridge (default: all)")
        parser.add_argument("--health-check-interval", type=float, default=10.0)

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the bridge until SIGTERM/SIGINT."""
        from django_qless.bridge import serve

        verbose = bool(options["verbosity"])

        def ready() -> None:
            if verbose:
                self.stdout.write(f"qless_events: listening on {options['alias']!r}")
                self.stdout.flush()

        sent = serve(options["alias"],
                     events=options["events"].split(",") if options["events"] else None,
                     health_check_interval=options["health_check_interval"], ready=ready)
        if verbose:
            self.stdout.write(f"qless_events: stopped after {sent} signal{pluralize(sent)}")
        sys.exit(0)
