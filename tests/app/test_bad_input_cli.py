"""The command-line layers: every bad-input case (docs/guarantees.md) that can enter them.

``manage.py qless`` (operator CLI), ``manage.py qless_worker`` and the Django-free
``qless-worker`` / ``python -m django_qless.core.workers``: a bad value is refused with one
clear line naming the option, no traceback, a non-zero exit, and every key DUMPs the same
before and after. The tables run in-process (``call_command`` / ``main``); a handful of rows
also run as real subprocesses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command

from django_qless.clients import get_client
from django_qless.core.worker_cli import main as core_main
from tests.app.bad_input import populate
from tests.app.helpers import ROOT, command_env, manage
from tests.core.conftest import snapshot

pytestmark = pytest.mark.django_db(transaction=True)

PUT = ["qless", "put", "default", "tests.app.jobs.add"]
DEEP = '{"a":' * 70 + "1" + "}" * 70


def case(section: str, args: list[str], match: str) -> Any:
    """One row: the command's argv and the message it must fail with."""
    label = " ".join(a if len(a) <= 12 else a[:10] + "..." for a in args[1:])
    return pytest.param(args, match, id=f"{section}: {label}")


QLESS_CASES: list[Any] = [
    case("c1", [*PUT, "--priority", "high"], r"--priority: must be an integer, got 'high'"),
    case("c2", [*PUT, "--priority", "nan"], r"argument --priority: must be an integer, got 'nan'"),
    *[case("c3", [*PUT, "--priority", v], r"argument --priority: must be an integer, got")
      for v in ("1.5", " 5 ", "1_0", "0x10", "+5")],
    case("c4", [*PUT, "--priority", "2147483648"],
         r"InvalidArgument: priority must be an integer in \[-2147483648, 2147483647\]"),
    case("c4", ["qless", "priority", "exists", "-2147483649"],
         r"InvalidArgument: priority must be an integer in \[-2147483648, 2147483647\]"),
    case("c3", ["qless", "priority", "exists", "1.5"], r"argument priority: must be an integer"),
    case("c5", [*PUT, "--delay", "-5"], r"InvalidArgument: delay must be >= 0, got -5"),
    *[case("c6", [*PUT, "--delay", v], r"argument --delay: must be a finite number, got")
      for v in ("inf", "nan", "1e309", "Infinity")],
    case("c6", [*PUT, "--delay", "1e12"], r"InvalidArgument: delay must be at most 315360000"),
    case("c7", [*PUT, "--delay", "abc"], r"argument --delay: must be a finite number, got 'abc'"),
    case("c7", [*PUT, "--delay", "0x10"], r"argument --delay: must be a finite number"),
    case("c8", [*PUT, "--retries", "-1"],
         r"InvalidArgument: retries must be an integer in \[0, 1000\], got -1"),
    case("c9", [*PUT, "--retries", "5.5"], r"argument --retries: must be an integer, got '5\.5'"),
    case("c9", [*PUT, "--retries", "1001"], r"retries must be an integer in \[0, 1000\], got 1001"),
    case("c10", [*PUT, "--data", "{bad"], r"^--data: invalid JSON: Expecting property name"),
    case("c10", [*PUT, "--args", "[1"], r"^--args: invalid JSON"),
    *[case("c11", [*PUT, "--data", v], r"^--data must be a JSON object, got ")
      for v in ('"str"', "[1]", "null", "1")],
    case("c11", [*PUT, "--args", '{"a": 1}'], r"^--args must be a JSON list, got dict$"),
    case("c11", [*PUT, "--kwargs", "[1]"], r"^--kwargs must be a JSON object, got list$"),
    case("c11", [*PUT, "--data", '{"a": 1}', "--args", "[1]"],
         r"^--data cannot be combined with --args/--kwargs"),
    case("c12", [*PUT, "--data", '{"a": NaN}'],
         r"InvalidArgument: data\['a'\] must be a finite number, got nan"),
    case("c13", [*PUT, "--data", '{"x": "' + "a" * (1 << 20) + '"}'],
         r"LimitExceeded: data is [0-9,]+ bytes, [0-9,]+ over the limit of 1,048,576 "),
    case("c14", [*PUT, "--data", DEEP], r"LimitExceeded: data\['a'\].* nested deeper than 64"),
    case("c14", [*PUT, "--data", "[" * 100_000 + "]" * 100_000],
         r"^--data: invalid JSON: nested too deeply$"),
    case("c15", [*PUT, "--jid", ""], r"InvalidArgument: jid must be a non-empty string"),
    *[case("c16", [*PUT, "--jid", f"exists{s}"], r"jid must not end in -history")
      for s in ("-history", "-dependents", "-dependencies")],
    case("c17", [*PUT, "--jid", "nightly-3"],
         r"InvalidArgument: Put\(\): Job nightly-3 collides with recurring job nightly"),
    *[case("c18", [*PUT, "--jid", v], r"InvalidArgument: jid (may only contain|must be at most)")
      for v in ("a:b", "a b", "x" * 65, "\u00e9", "a\x01")],
    case("c18", ["qless", "get", "a:b"], r"InvalidArgument: jid may only contain"),
    case("c19", ["qless", "put", "", "tests.app.jobs.add"],
         r"InvalidArgument: queue must be a non-empty string"),
    *[case("c20", ["qless", "put", v, "tests.app.jobs.add"], r"InvalidArgument: queue ")
      for v in ("<script>", "a/b", "a:b", "{a}", "q" * 65)],
    case("c20", ["qless", "list", "<script>"], r"InvalidArgument: queue may only contain"),
    case("c20", ["qless", "stats", "a:b"], r"InvalidArgument: queue may only contain"),
    case("c20", ["qless", "move", "exists", "a:b"], r"InvalidArgument: queue may only contain"),
    *[case("c22", ["qless", action, "nope", *extra], r"^no job nope$")
      for action, extra in (("get", []), ("cancel", []), ("priority", ["1"]),
                            ("move", ["q"]), ("track", []), ("untrack", []), ("retry", []))],
    case("c34", [*PUT, "--jid", "me", "--depends", "me"],
         r"InvalidArgument: depends must not contain the job itself: 'me'"),
    case("c34", [*PUT, "--jid", "parent", "--depends", "child"],
         r"InvalidArgument: Put\(\): Arg \"depends\" invalid: dependency cycle"),
    case("c35", [*PUT, "--depends", ",".join(f"j{n}" for n in range(1001))],
         r"LimitExceeded: depends has 1001 items, at most 1000 allowed"),
    case("c37", ["qless", "cancel", "parent"],
         r"DependencyError: Cancel\(\): parent is a dependency of child"),
    case("c39", [*PUT, "--tags", ",".join(f"t{n}" for n in range(51))],
         r"LimitExceeded: tags has 51 items, at most 50 allowed"),
    *[case("c39", [*PUT, "--tags", v], r"InvalidArgument: tags item must be")
      for v in ("t" * 65, "a\x01")],
    case("c46", ["qless", "list", "default", "--offset", "-1"],
         r"argument --offset: must be an integer >= 0, got '-1'"),
    case("c46", ["qless", "list", "default", "--count", "10000"],
         r"InvalidArgument: count must be an integer in \[0, 500\], got 10000"),
    case("c46", ["qless", "list", "--tag", "t", "--count", "x"],
         r"argument --count: must be an integer, got 'x'"),
    case("c46", ["qless", "failed", "grp", "--count", "501"],
         r"InvalidArgument: limit must be an integer in \[0, 500\], got 501"),
    case("c46", ["qless", "retry", "--group", "grp", "--queue", "default", "--count", "501"],
         r"InvalidArgument: count must be an integer in \[0, 500\], got 501"),
    case("c47", ["qless", "config", "set", "heartbeat", "0"],
         r"InvalidArgument: config heartbeat must be an integer from 1 to 604800 \(seconds\), "
         r"got '0'"),
    case("c47", ["qless", "config", "set", "heartbeat", "99999999999"],
         r"InvalidArgument: config heartbeat must be an integer from 1 to 604800 \(seconds\), "
         r"got '99999999999'"),
    *[case("c47", ["qless", "config", "set", "heartbeat", v],
           r"InvalidArgument: config heartbeat must be an integer, got")
      for v in ("nan", "abc", "1.5")],
    case("c47", ["qless", "config", "set", "grace-period", "-1"],
         r"InvalidArgument: config grace-period must be an integer from 0 to 86400"),
    case("c47", ["qless", "config", "set", "jobs-history", "-1"],
         r"InvalidArgument: config jobs-history must be an integer from 0 to 315360000"),
    case("c47", ["qless", "config", "set", "", "1"],
         r"InvalidArgument: config key must be a non-empty printable string"),
    case("c48", ["qless", "put", "default", "os.system"], r"'os\.system' is not a registered job"),
    case("c48", ["qless", "put", "default", ""], r"'' is not a registered job"),
    *[case("c50", ["qless", "put", v, "tests.app.jobs.add"],
           r"InvalidArgument: queue may only contain")
      for v in ("a\x00b", "e\u0301", "a\ud800")],
    case("c51", ["qless", "throttle", "set", "t", "-1"],
         r"argument maximum: must be an integer >= 0, got '-1'"),
    *[case("c51", ["qless", "throttle", "set", "t", v], r"argument maximum: must be an integer")
      for v in ("nan", "1.5")],
    case("c51", ["qless", "throttle", "set", "t", "1", "--ttl", "-1"],
         r"argument --ttl: must be an integer >= 0, got '-1'"),
    case("c51", ["qless", "throttle", "set", "", "1"],
         r"InvalidArgument: throttle id must be a non-empty printable string"),
    # All or nothing: a bad item anywhere refuses the whole command.
    case("c22", ["qless", "cancel", "exists", "nope"], r"^no job nope$"),
    case("c22", ["qless", "retry", "bad", "exists"], r"^job exists is waiting, not failed$"),
    case("c20", ["qless", "pause", "default", "a:b"], r"InvalidArgument: queue may only contain"),
    case("c20", ["qless", "unpause", "default", "a:b"],
         r"InvalidArgument: queue may only contain"),
]

WORKER = ["default", "--print-options"]
WORKER_OPTION_CASES: list[Any] = [
    # (option argv, message) shared by manage.py qless_worker and qless-worker
    pytest.param(["--processes", "-1"], r"--processes: must be an integer >= 0", id="processes=-1"),
    pytest.param(["--processes", "two"], r"--processes: must be an integer", id="processes=two"),
    pytest.param(["--interval", "0"], r"--interval: must be > 0, got '0'", id="interval=0"),
    pytest.param(["--interval", "-1"], r"--interval: must be > 0, got '-1'", id="interval=-1"),
    pytest.param(["--interval", "nan"], r"--interval: must be a finite number", id="interval=nan"),
    pytest.param(["--interval", "inf"], r"--interval: must be a finite number", id="interval=inf"),
    pytest.param(["--timeout", "nan"], r"--timeout: must be a finite number", id="timeout=nan"),
    pytest.param(["--timeout", "-1"], r"--timeout: must be >= 0, got '-1'", id="timeout=-1"),
    pytest.param(["--max-jobs", "-1"], r"--max-jobs: must be an integer >= 0", id="max-jobs=-1"),
    pytest.param(["--max-jobs", "1.5"], r"--max-jobs: must be an integer", id="max-jobs=1.5"),
    pytest.param(["--max-duration", "inf"], r"--max-duration: must be a finite number",
                 id="max-duration=inf"),
    pytest.param(["--child-max-jobs", "-1"], r"--child-max-jobs: must be an integer >= 0",
                 id="child-max-jobs=-1"),
    pytest.param(["--kill-grace", "nan"], r"--kill-grace: must be a finite number",
                 id="kill-grace=nan"),
    pytest.param(["--shutdown-grace", "-1"], r"--shutdown-grace: must be >= 0",
                 id="shutdown-grace=-1"),
    pytest.param(["--start-timeout", "-1"], r"--start-timeout: must be >= 0",
                 id="start-timeout=-1"),
    pytest.param(["--start-timeout", "nan"], r"--start-timeout: must be a finite number",
                 id="start-timeout=nan"),
    pytest.param(["--reserver", "bogus"], r"--reserver: invalid choice: 'bogus'", id="reserver"),
    *[pytest.param(["--name", v],
                   r"--name: must be 1-128 printable ASCII characters without ' ' or ':'",
                   id=f"c49 name={v[:6]!r}") for v in ("a:b", "", "a b", "x" * 129, "a\x01")],
    *[pytest.param([v], r"argument queues: (queue|invalid queue pattern)", id=f"c20 queue={v!r}")
      for v in ("a:b", "<script>", "q" * 65, "a:*", "a/b")],
    pytest.param(["--exec", "echo 'x"], r"argument --exec: cannot parse .*No closing quotation",
                 id="exec"),
    pytest.param(["--import", "no.such.module"],
                 r"argument --import: no module named 'no\.such\.module'", id="c48 import"),
]


@pytest.fixture
def populated(r: redis.Redis) -> None:
    """A waiting job, a dependency pair, a recurring job, a failed job and a throttle."""
    populate(get_client())
    assert r.dbsize() > 10


def run_command(args: list[str]) -> str:
    """Run a management command in-process; return its stdout."""
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize("args,match", QLESS_CASES)
def test_operator_cli_refuses_and_writes_nothing(populated: None, r: redis.Redis,
                                                 args: list[str], match: str) -> None:
    """`manage.py qless ...`: CommandError with one line naming the value; Redis unchanged."""
    before = snapshot(r)
    with pytest.raises(CommandError, match=match) as caught:
        run_command(args)
    assert "\n" not in str(caught.value)
    assert snapshot(r) == before


@pytest.mark.parametrize("option,match", WORKER_OPTION_CASES)
def test_django_worker_refuses_bad_options(populated: None, r: redis.Redis, option: list[str],
                                           match: str) -> None:
    """`manage.py qless_worker`: CommandError naming the option, before any work."""
    before = snapshot(r)
    with pytest.raises(CommandError, match=match) as caught:
        run_command(["qless_worker", *option, *WORKER])
    assert "\n" not in str(caught.value)
    assert snapshot(r) == before


def test_django_worker_refuses_unknown_alias(populated: None, r: redis.Redis) -> None:
    before = snapshot(r)
    with pytest.raises(CommandError, match=r"^unknown QLESS alias 'nope'$"):
        run_command(["qless_worker", "--alias", "nope", *WORKER])
    assert snapshot(r) == before


@pytest.mark.parametrize("option,match", WORKER_OPTION_CASES)
def test_core_worker_cli_refuses_bad_options(populated: None, r: redis.Redis, redis_url: str,
                                             capsys: pytest.CaptureFixture[str],
                                             option: list[str], match: str) -> None:
    """`qless-worker`: exit code 2 and `qless-worker: error: <option>: ...`; no traceback."""
    before = snapshot(r)
    try:
        code = core_main(["--url", redis_url, *option, *WORKER])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("qless-worker: error: ")
    assert re.search(match, last), last
    assert "Traceback" not in err
    assert snapshot(r) == before


def test_core_worker_cli_refuses_a_bad_url_without_echoing_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = core_main(["--url", "http://user:secret@host/0", "default", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "argument --url: must start with redis://, rediss:// or unix://" in err
    assert "secret" not in err


def test_good_worker_options_are_honoured(populated: None, redis_url: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The values next to the refused ones are accepted (interval 0.5 is not the default)."""
    data = json.loads(run_command(["qless_worker", "--interval", "0.5", "--processes", "0",
                                   "--max-jobs", "0", "--timeout", "0", "--exec", "cat -",
                                   "--name", "w" * 128, "default", "q*", "--print-options"]))
    assert data["interval"] == 0.5 and data["processes"] == 0
    assert data["queues"] == ["default", "q*"] and data["exec_command"] == ["cat", "-"]
    assert core_main(["--url", redis_url, "--interval", "1e-1", "--import", "json",
                      "a.b-c_d", "img.[ab]*", "--print-options"]) == 0
    assert '"interval": 0.1' in capsys.readouterr().out


def test_good_operator_values_are_accepted(populated: None) -> None:
    """The boundaries next to refused values go through (so the table can fail)."""
    out = run_command([*PUT, "--priority", "-2147483648", "--retries", "1000", "--delay",
                       "315360000", "--jid", "j" * 64, "--tags", "a,b", "--json"])
    assert json.loads(out) == {"jid": "j" * 64}
    assert get_client().jobs["j" * 64].state == "scheduled"
    assert run_command(["qless", "list", "nope"]).strip() == ""  # case 21: empty, not an error
    out = run_command(["qless", "cancel", "parent", "child", "--json"])
    assert sorted(json.loads(out)["canceled"]) == ["child", "parent"]


def test_put_depending_on_a_missing_job_is_refused(populated: None, r: redis.Redis) -> None:
    before = snapshot(r)
    with pytest.raises(CommandError, match="nope"):
        run_command([*PUT, "--depends", "nope"])
    assert snapshot(r) == before


# -- real subprocesses ----------------------------------------------------------------------

SUBPROCESS_CASES: list[Any] = [
    pytest.param(["qless", "put", "default", "tests.app.jobs.add", "--priority", "high"],
                 "--priority", id="qless put --priority high"),
    pytest.param(["qless", "put", "default", "tests.app.jobs.add", "--delay", "nan"],
                 "--delay", id="qless put --delay nan"),
    pytest.param(["qless", "put", "default", "tests.app.jobs.add", "--data", "[" * 100_000],
                 "--data", id="qless put --data deep"),
    pytest.param(["qless", "put", "a:b", "tests.app.jobs.add"], "queue", id="qless put a:b"),
    pytest.param(["qless", "cancel", "exists", "nope"], "no job nope", id="qless cancel partial"),
    pytest.param(["qless", "config", "set", "heartbeat", "0"], "heartbeat",
                 id="qless config heartbeat 0"),
    pytest.param(["qless_worker", "default", "--interval", "0"], "--interval: must be > 0",
                 id="qless_worker --interval 0"),
    pytest.param(["qless_worker", "a:b", "--processes", "0"], "queue", id="qless_worker a:b"),
    pytest.param(["qless_worker", "", "--processes", "0"], "argument queues: no queues given",
                 id="qless_worker empty queue"),
    pytest.param(["qless_worker", "default", "--import", "no.such.module"], "--import",
                 id="qless_worker --import"),
]


def assert_clean_refusal(result: subprocess.CompletedProcess[str], needle: str) -> None:
    """Non-zero exit, the last stderr line names the option, no traceback."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and needle in lines[-1], result.stderr
    assert len(lines[-1]) < 300


@pytest.mark.parametrize("args,needle", SUBPROCESS_CASES)
def test_manage_py_subprocess_refuses_cleanly(populated: None, r: redis.Redis, redis_url: str,
                                              args: list[str], needle: str) -> None:
    before = snapshot(r)
    assert_clean_refusal(manage(redis_url, *args), needle)
    assert snapshot(r) == before


@pytest.mark.parametrize("args,needle", [
    pytest.param(["default", "--interval", "inf"], "--interval", id="interval inf"),
    pytest.param(["a:b", "--processes", "0"], "queues", id="queue a:b"),
    pytest.param(["default", "--timeout", "nan"], "--timeout", id="timeout nan"),
    pytest.param(["default", "--exec", "echo 'x"], "--exec", id="exec quote"),
])
def test_core_worker_subprocess_refuses_cleanly(populated: None, r: redis.Redis, redis_url: str,
                                                args: list[str], needle: str) -> None:
    before = snapshot(r)
    result = subprocess.run([sys.executable, "-m", "django_qless.core.workers", "--url",
                             redis_url, "--max-jobs", "1", *args], cwd=ROOT, text=True,
                            capture_output=True, timeout=60, env=command_env(redis_url))
    assert result.returncode == 2
    assert_clean_refusal(result, needle)
    assert snapshot(r) == before
