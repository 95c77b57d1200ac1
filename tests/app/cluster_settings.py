"""The test project with its default alias sharded over a cluster named by the environment
(``QLESS_CLUSTER``: the twelve-factor form), for subprocess tests of the commands."""

from __future__ import annotations

from tests.app.settings import *  # noqa: F403 - the test project, with another QLESS

QLESS = {
    "default": {"SHARDS": 4, "PLACEMENT": {"alpha": 0, "beta": 1, "gamma": 3}},
    "JOB_MODULES": ["tests.app.legacy_jobs"],
}
