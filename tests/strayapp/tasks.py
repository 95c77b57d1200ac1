"""A ``@job`` in the wrong module: workers import ``<app>.jobs`` only."""

from __future__ import annotations

from django_qless import job


@job(queue="stray")
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()
