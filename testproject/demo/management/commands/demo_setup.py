"""``manage.py demo_setup``: the demo superuser and the recurring cleanup job (idempotent)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    """Create or update the demo superuser; schedule the recurring job."""

    help = "Prepare the demo: superuser + recurring job."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        """Do it."""
        from demo import jobs

        users = get_user_model()
        user, _ = users.objects.get_or_create(username=options["username"],
                                              defaults={"email": "admin@example.com"})
        user.is_staff = user.is_superuser = True
        user.set_password(options["password"])
        user.save()
        handle = jobs.cleanup_old_reports.recur(300, 7)
        self.stdout.write(f"recurring cleanup job {handle.jid}")
