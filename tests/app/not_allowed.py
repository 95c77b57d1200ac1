"""A job class that is neither decorated nor under JOB_MODULES: workers must refuse it."""

from typing import Any


class Sneaky:
    """Must never run."""

    @staticmethod
    def process(job: Any) -> None:
        raise AssertionError("an unregistered job ran")
