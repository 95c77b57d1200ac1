"""pytest plugin: `-p tests.core.shard_keyspace` runs tests/core in the shard keyspace s7.

Loaded before the conftests, so tests/core/keyspace_mode.py sees the variable.
"""

import os

os.environ.setdefault("QLESS_TEST_KEYSPACE", "s7")
