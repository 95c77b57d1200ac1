"""Run the demo: Redis (embedded unless QLESS_URL is set), migrations, a worker, the dev server.

    python scripts/demo.py            # interactive: prints the URL and the admin login
    python scripts/demo.py --smoke    # CI: start everything, fetch a page, run one job, stop

Called by `make demo`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "testproject"
sys.path.insert(0, str(ROOT))

from django_qless.core.server import RedisServer, find_redis_server  # noqa: E402


def free_port() -> int:
    """Return a TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(env: dict[str, str], *args: str, quiet: bool = False) -> str:
    """Run a manage.py command to completion; return its stdout (exit on failure)."""
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env,
                            text=True, capture_output=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"manage.py {' '.join(args)} failed ({result.returncode})")
    if not quiet and result.stdout.strip():
        print(result.stdout.strip())
    return result.stdout


def start(env: dict[str, str], *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a long-running manage.py command in its own process group."""
    out = open(log, "ab") if log else None  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=PROJECT, env=env,
                            stdout=out, stderr=subprocess.STDOUT if out else None,
                            start_new_session=True)


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Stop a process group: TERM, then KILL after the timeout."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def fetch(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET a URL; return (status, body) even for HTTP errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_server(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Wait until the dev server answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the web server exited with {proc.returncode}")
        try:
            fetch(url, timeout=1.0)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the web server did not answer at {url} within {timeout}s")


def smoke(base: str, logs: list[Path]) -> None:
    """Fetch pages, run one job through the worker, check its result."""
    status, body = fetch(base + "/")
    assert status == 200 and b"django-qless demo" in body, (status, body[:300])
    print(f"[smoke] GET / -> {status}")
    status, _ = fetch(base + "/admin/login/")
    assert status == 200, status
    print(f"[smoke] GET /admin/login/ -> {status}")
    status, _ = fetch(base + "/qless/")
    print(f"[smoke] GET /qless/ -> {status} (dashboard; login required)")
    status, body = fetch(base + "/smoke/")
    assert status == 200, (status, body[:300])
    jid = json.loads(body)["jid"]
    deadline = time.monotonic() + 60
    state = None
    while time.monotonic() < deadline:
        status, body = fetch(f"{base}/jobs/{jid}.json")
        info = json.loads(body)
        state = info.get("state")
        if state == "complete":
            assert info["result"] == 42, info
            print(f"[smoke] job {jid} complete, result {info['result']}")
            return
        if state == "failed":
            break
        time.sleep(0.2)
    for log in logs:
        sys.stderr.write(f"---- {log.name}\n{log.read_text(errors='replace')[-4000:]}\n")
    raise SystemExit(f"[smoke] job {jid} did not complete (state {state})")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="start, check, stop (for CI)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 0)) or None)
    args = parser.parse_args(argv)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # run the cleanup below on TERM/HUP too

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)

    workdir = Path(tempfile.mkdtemp(prefix="qless-demo-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PROJECT)]),
           "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    if args.smoke:
        env["DATABASE_URL"] = f"sqlite:///{workdir / 'db.sqlite3'}"
    server = None
    if not env.get("QLESS_URL"):
        server = RedisServer(find_redis_server(prefer="embedded")).start()
        env["QLESS_URL"] = server.url
        print(f"Redis: embedded server {server.binary} on {server.socket_path}")
    else:
        print("Redis: QLESS_URL from the environment")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        manage(env, "migrate", "--noinput", quiet=True)
        password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(9)
        # `--password=...` in one word: a generated password may start with "-".
        manage(env, "demo_setup", "--username", "admin", f"--password={password}")
        port = args.port or (free_port() if args.smoke else 8000)
        base = f"http://127.0.0.1:{port}"
        logs = [workdir / "worker.log", workdir / "web.log"] if args.smoke else []
        procs.append(start(env, "qless_worker", "--processes", "2", "-v", "1",
                           log=logs[0] if logs else None))
        procs.append(start(env, "runserver", f"127.0.0.1:{port}", "--noreload",
                           log=logs[1] if logs else None))
        wait_for_server(base + "/", procs[1])
        if args.smoke:
            smoke(base, logs)
            print("[smoke] OK")
            return 0
        print(f"\n  Demo:      {base}/\n  Dashboard: {base}/qless/\n  Admin:     {base}/admin/"
              f"\n  Login:     admin / {password}\n\nCtrl-C stops everything.", flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc)
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
