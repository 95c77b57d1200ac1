"""A job module whose import takes a minute (imported by a worker with `--import`)."""

from __future__ import annotations

import sys
import time

sys.stderr.write("slow_import: importing\n")
sys.stderr.flush()
time.sleep(60)
