"""qless-py 0.11.4 adapter: its Client/Queue/Job API and its ForkingWorker."""

from __future__ import annotations

import json
import pkgutil
import sys
import time
import uuid

import qless
from _common import main
from qless.workers.forking import ForkingWorker

__all__ = ["QlessPy"]

KLASS = "jobs_qless_py.NoOp"
POLL_INTERVAL = 0.01
PATCH_NOTE = (
    "qless-py's bundled qless.lua defines `function table.extend(...)` on the global `table`, "
    "which Redis 6.2.7+/7 refuse (read-only globals); patched at registration to a local "
    "function `table_extend` (definition + its 2 call sites)"
)


def patched_script() -> str:
    """Return qless-py's bundled Lua with the one global-table write made local."""
    text = pkgutil.get_data("qless", "qless-core/qless.lua").decode()
    old = "function table.extend(self, other)"
    if old not in text:
        raise RuntimeError("qless-py's Lua changed: patch target not found")
    text = text.replace(old, "local function table_extend(self, other)")
    return text.replace("table.extend(", "table_extend(")


def client(url: str) -> qless.Client:
    """Create a qless-py client and register the patched script instead of the stock one."""
    c = qless.Client(url)
    c._lua = c.redis.register_script(patched_script())
    return c


class QlessPy:
    """Drive qless-py through its public API (the put fill uses its script via a pipeline)."""

    name = "qless-py"
    multi_queue = True
    notes = {
        "lua_patch": PATCH_NOTE,
        "drain": "Queue.pop() + Job.complete()",
        "worker": f"qless.workers.forking.ForkingWorker (SerialWorker children), poll interval "
        f"{POLL_INTERVAL}s passed through the API (its CLI only accepts whole seconds, default 60)",
    }

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = client(url)
        self.queues: dict[str, qless.Queue] = {}
        print("qless-py: " + PATCH_NOTE, file=sys.stderr)

    def _queue(self, name: str) -> qless.Queue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = self.client.queues[name]
        return q

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self._queue(queue).put(KLASS, {"i": i, "t0": t0})

    def fill(self, n: int, queues: list[str]) -> None:
        for start in range(0, n, 1000):
            pipe = self.client.redis.pipeline(transaction=False)
            for i in range(start, min(n, start + 1000)):
                args = ["put", repr(time.time()), queues[i % len(queues)], uuid.uuid4().hex, KLASS,
                        json.dumps({"i": i, "t0": 0.0}), 0, "priority", 0, "tags", "[]",
                        "retries", 5, "depends", "[]"]
                self.client._lua(keys=[], args=args, client=pipe)
            pipe.execute()

    def pop_complete(self, queues: list[str]) -> bool:
        for name in queues:  # the order qless-py's worker uses: first queue with a job
            job = self._queue(name).pop()
            if job:
                job.complete()
                return True
        return False

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        return [sys.executable, __file__, "worker", str(processes), queue]


def run_worker(url: str, processes: int, queue: str) -> None:
    """Do what qless-py-worker does, with the patched script and a sub-second poll."""
    import jobs_qless_py  # noqa: F401 - preload like `qless-py-worker -m`

    ForkingWorker([queue], client(url), workers=processes, interval=POLL_INTERVAL).run()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        import os

        run_worker(os.environ["BENCH_REDIS_URL"], int(sys.argv[2]), sys.argv[3])
    else:
        main(QlessPy)
