"""Undecorated job classes, allowed by QLESS["JOB_MODULES"]."""

from typing import Any


class Legacy:
    """A plain qless job class."""

    @staticmethod
    def process(job: Any) -> None:
        job.data["legacy"] = True
