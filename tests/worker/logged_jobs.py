"""Jobs for the logging tests; importing this module logs every record as JSON to a file.

The file is $QLESS_TEST_LOG: one JSON object per record, with the fields a JSON formatter
would show (level, logger, message, and the job fields `JobContextFilter` fills in).
"""

from __future__ import annotations

import json
import logging
import os

from django_qless.core.job import Job
from django_qless.core.registry import register
from django_qless.core.workers import JobContextFilter

__all__ = ["JsonLines"]

FIELDS = ("jid", "klass", "queue", "attempt", "worker")


class JsonLines(logging.Handler):
    """Append each record to a file as one JSON line."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's level, logger, message and job fields."""
        line = {"level": record.levelname, "logger": record.name,
                "message": record.getMessage(), "traceback": bool(record.exc_info),
                **{name: getattr(record, name, "missing") for name in FIELDS}}
        with open(self.path, "a") as out:
            out.write(json.dumps(line) + "\n")


if os.environ.get("QLESS_TEST_LOG"):
    handler = JsonLines(os.environ["QLESS_TEST_LOG"])
    handler.addFilter(JobContextFilter())
    logging.getLogger().addHandler(handler)


@register()
def chatty(job: Job) -> None:
    """Log from inside the job, with a logger of the job's own."""
    logging.getLogger("shop.jobs").warning("inside the job")


@register()
def retry_later(job: Job) -> None:
    """Retry itself in 30 s, then raise to say so."""
    job.retry(30, "shop.Later", "not now")
    raise RuntimeError("try again later")
