"""The jobs of tests/worker/jobs.py, for a worker whose supervisor stalls 2 s after each
fork, before it goes on to subscribe to the new child's channel (so the child, left
alone, would reach Redis first). Imported by the worker (`--import`), never by pytest."""

from __future__ import annotations

import os
import time

import tests.worker.jobs  # noqa: F401 - registers the jobs

os.register_at_fork(after_in_parent=lambda: time.sleep(2.0))
