"""Send the qless-py 0.11.4 suite's default-address clients to the runner's private Redis.

Copied next to the suite as `conftest.py` by scripts/interop_qless_py.py. Tests build
clients with `qless.Client()` or `qless.Client(hostname=...)`, whose default address is a
Redis on localhost:6379 that we must never touch; only that default is changed.
"""

import os

import qless

_URL = os.environ["QLESS_INTEROP_URL"]
_defaults = qless.Client.__init__.__defaults__ or ()
qless.Client.__init__.__defaults__ = (_URL, *_defaults[1:])
