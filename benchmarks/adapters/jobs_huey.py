"""The huey instance and no-op task run by huey's consumer."""

import os

from _jobbody import record
from huey import RedisHuey

__all__ = ["huey", "noop"]

# The consumer uses huey's default blocking dequeue (BRPOP); the in-process drain asks for
# the plain RPOP so an empty queue ends the loop instead of blocking for read_timeout.
huey = RedisHuey(
    "bench",
    url=os.environ["BENCH_REDIS_URL"],
    blocking=os.environ.get("BENCH_HUEY_BLOCKING", "1") == "1",
)


@huey.task()
def noop(i: int, t0: float = 0.0) -> None:
    """Record the job body's start."""
    record(t0)
