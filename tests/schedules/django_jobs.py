"""Jobs with cron schedules for the Django-side schedule tests (imported by them only)."""

from __future__ import annotations

from django_qless import job

__all__ = ["Nightly", "sweep", "tally"]


@job(queue="cron", cron="*/5 * * * *", timezone="Europe/Paris")
def sweep() -> str:
    """Return a marker (a schedule declared on the function)."""
    return "swept"


@job(queue="cron")
def tally(kind: str, *, limit: int = 10) -> str:
    """Return what it was called with (scheduled from QLESS["SCHEDULE"])."""
    return f"{kind}:{limit}"


@job(queue="cron", cron="30 2 * * *", timezone="America/New_York", missed="skip")
class Nightly:
    """A class job with a schedule."""

    @staticmethod
    def process(job: object) -> None:
        """Do nothing."""
