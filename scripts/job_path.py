"""Count the package files one job's path runs code in: a put, then a serial worker.

Starts a private redis-server, puts one job of a registered class with the core client (in a
subprocess), then runs `python -m django_qless.core.workers -n 0 --max-jobs 1` on it (in
another subprocess). Both run under a tracer that notes every code object that starts
executing (a module's top level included), in every thread. Prints how many files under
`django_qless/` each side ran, and their union; `--list` prints the files too.
`tests/core/test_job_path.py` runs `measure` and keeps the counts from growing.

    python scripts/job_path.py [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testservers.redis_server import RedisServer  # noqa: E402

PACKAGE = str(ROOT / "django_qless") + os.sep
QUEUE = "job-path"

# Run in the traced subprocess: note each file a frame starts in, then run the side asked for.
BOOTSTRAP = r"""
import json, os, sys, threading
seen = set()
def note(frame, event, arg):
    seen.add(frame.f_code.co_filename)
    return None
def dump():
    sys.settrace(None)
    with open(os.environ["JOB_PATH_OUT"], "w") as out:
        json.dump(sorted(seen), out)
sys.settrace(note)
threading.settrace(note)
side = sys.argv[1]
try:
    if side == "put":
        from django_qless.core.client import Client
        client = Client(sys.argv[2])
        client.queues[sys.argv[3]].put("job_path_jobs.hello", {"n": 1})
        client.close()
    else:
        import runpy
        sys.argv = ["django_qless.core.workers", *sys.argv[2:]]
        runpy.run_module("django_qless.core.workers", run_name="__main__", alter_sys=True)
finally:
    dump()
"""

JOBS = '''
from django_qless.core.registry import register


@register("job_path_jobs.hello")
def hello(job):
    return None
'''


def traced(args: list[str], workdir: str, env: dict[str, str]) -> set[str]:
    """Run BOOTSTRAP with `args` under the tracer; return the package files it ran."""
    out = os.path.join(workdir, f"seen-{args[0]}.json")
    run_env = {**env, "JOB_PATH_OUT": out}
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, *args], env=run_env,
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode not in (0, None):
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"{args[0]} exited with {proc.returncode}")
    with open(out) as f:
        files = json.load(f)
    return {os.path.relpath(p, ROOT) for p in files
            if os.path.abspath(p).startswith(PACKAGE)}


def measure(url: str) -> tuple[set[str], set[str]]:
    """Put one job and run it with a serial worker on the empty database at `url`; return
    the package files (relative to the repository) each side ran."""
    with tempfile.TemporaryDirectory(prefix="job-path-") as workdir:
        Path(workdir, "job_path_jobs.py").write_text(JOBS)
        path = os.pathsep.join([workdir, str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        put = traced(["put", url, QUEUE], workdir, env)
        worker = traced(["worker", "--url", url, "-n", "0", "--max-jobs", "1",
                         "--import", "job_path_jobs", QUEUE], workdir, env)
    conn = redis.Redis.from_url(url, decode_responses=True)
    try:
        done = conn.zcard("ql:completed")
    finally:
        conn.close()
    if done != 1:
        raise RuntimeError(f"the job did not complete (ql:completed holds {done})")
    return put, worker


def main() -> int:
    """Measure and print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the files too")
    parser.add_argument("--redis-server", default=os.environ.get("QLESS_REDIS_SERVER"))
    options = parser.parse_args()
    with RedisServer(options.redis_server) as server:
        put, worker = measure(server.url)
    print(f"put: {len(put)} files, worker: {len(worker)} files, total: {len(put | worker)}")
    if options.list:
        for name in sorted(put | worker):
            sides = ("put " if name in put else "    ") + ("worker" if name in worker else "")
            print(f"  {sides:11} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
