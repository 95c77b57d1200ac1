"""Run the demo: Redis (embedded unless QLESS_URL is set), migrations, a worker, the dev server.

    python scripts/demo.py            # interactive: prints the URL and the admin login
    python scripts/demo.py --smoke    # CI: start everything, fetch a page, run one job, stop

Called by `make demo`. DEMO_PORT (or --port) asks for a port, and the demo stops with a
message if that one is taken; without it, 8000, or any free port when 8000 is taken.
DEMO_PASSWORD sets the admin password (default: a random one, printed). The web server's
and the worker's logs go to files whose paths the banner prints.
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

from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

DEFAULT_PORT = 8000


def free_port() -> int:
    """Return a TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Tell whether something listens on (or holds) the port."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            return True
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def choose_port(asked: int | None, default: int = DEFAULT_PORT) -> tuple[int, str | None]:
    """Return the port to serve on and a note when it is not the one expected.

    A port the user asked for (DEMO_PORT, --port) must be free: the demo stops rather than
    talk to another server. The default port is only a preference.
    """
    if asked:
        if port_taken(asked):
            raise SystemExit(f"Port {asked} (DEMO_PORT / --port) is already in use: stop what "
                             "listens there or choose another port, e.g. DEMO_PORT=8001.")
        return asked, None
    if not port_taken(default):
        return default, None
    port = free_port()
    return port, f"Port {default} is in use, so the demo serves on port {port}."


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


def wait_for_server(base: str, token: str, proc: subprocess.Popen[bytes],
                    log: Path | None = None, timeout: float = 30.0) -> None:
    """Wait until our own dev server answers (its token proves it is not another one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise SystemExit(f"{tail}\nthe web server exited with {proc.returncode}")
        try:
            status, body = fetch(base + "/instance/", timeout=1.0)
        except OSError:
            time.sleep(0.2)
            continue
        if status == 200 and body.decode(errors="replace") == token:
            return
        time.sleep(0.2)  # another server answered on this port, or ours is still starting
    raise SystemExit(f"the demo's web server did not answer at {base}/ within {timeout}s")


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

    # Before anything starts: a taken port fails early and clearly (CI takes any free port).
    port, note = (free_port(), None) if args.smoke and not args.port else choose_port(args.port)
    workdir = Path(tempfile.mkdtemp(prefix="qless-demo-"))
    token = secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PROJECT)]),
           "DJANGO_SETTINGS_MODULE": "testproject.settings", "DEMO_INSTANCE": token}
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
        base = f"http://127.0.0.1:{port}"
        # Logs go to files: the dashboard polls every few seconds, and one line per request
        # on the terminal would scroll the login away.
        logs = [workdir / "worker.log", workdir / "web.log"]
        procs.append(start(env, "qless_worker", "--processes", "2", "-v", "1", log=logs[0]))
        procs.append(start(env, "runserver", f"127.0.0.1:{port}", "--noreload", log=logs[1]))
        wait_for_server(base, token, procs[1], logs[1])
        if args.smoke:
            smoke(base, logs)
            print("[smoke] OK")
            return 0
        print(f"\n{note}" if note else "", end="")
        print(f"\n  Demo:      {base}/\n  Dashboard: {base}/qless/\n  Admin:     {base}/admin/"
              f"\n  Login:     admin / {password}\n  Logs:      {logs[1]} (web), {logs[0]} "
              "(worker); removed when the demo stops\n\nCtrl-C stops everything.", flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        for log in logs:
            sys.stderr.write(f"---- {log}\n{log.read_text(errors='replace')[-2000:]}\n")
        print("A demo process stopped unexpectedly (its log is above).", file=sys.stderr)
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
