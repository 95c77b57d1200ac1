"""The test settings, with the flow tests' jobs known to the worker."""

from __future__ import annotations

from tests.app.settings import *  # noqa: F403
from tests.app.settings import QLESS as _BASE

QLESS = {**_BASE, "JOB_MODULES": [*_BASE["JOB_MODULES"], "tests.flows.jobs"]}
