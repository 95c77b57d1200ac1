"""Rate-limited @job functions and classes for the Django tests."""

from __future__ import annotations

from typing import Any

from django_qless import job

__all__ = ["Export", "charge", "ping"]


@job(queue="limited", rate_limit="2/m", rate_key="customer")
def charge(customer: str, amount: int = 1) -> int:
    """Charge a customer (at most two a minute each)."""
    return amount


@job(queue="limited", rate_limit="1/h")
def ping() -> None:
    """Do nothing, at most once an hour."""


@job(queue="limited", rate_limit="1/m", rate_key="account.id")
class Export:
    """A class job limited per account."""

    @staticmethod
    def process(job: Any) -> None:
        job.data["done"] = True
