"""Provide the `TestQless` base class that qless-py 0.11.4's test modules import.

The sdist on PyPI ships the suite without its `common` module, so the interop runner
(scripts/interop_qless_py.py) copies this file next to the suite as `common.py`. It is our
own: each test gets a client, a second client named `worker`, and an empty private Redis.
"""

import logging
import os
import unittest

import qless

URL = os.environ["QLESS_INTEROP_URL"]


class TestQless(unittest.TestCase):
    """Give each test two clients on an empty Redis, and empty it again afterwards."""

    def setUp(self):
        # The suite fails jobs on purpose; their tracebacks would only bury real failures.
        qless.logger.setLevel(logging.CRITICAL)
        self.client = qless.Client(URL)
        self.worker = qless.Client(URL, hostname="worker")
        # Leftovers from another test would make results depend on the order of tests.
        self.assertEqual(self.client.redis.dbsize(), 0, "test started on a non-empty Redis")

    def tearDown(self):
        self.client.redis.flushdb()
