"""``manage.py qless`` on the first day: argument checks, --settings anywhere, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_qless.clients import get_client
from tests.app.helpers import ROOT, command_env, manage

pytestmark = pytest.mark.django_db(transaction=True)


def put(*args: str) -> str:
    out = StringIO()
    call_command("qless", "put", "default", *args, "--json", stdout=out)
    return str(json.loads(out.getvalue())["jid"])


@pytest.mark.parametrize(("args", "message"), [
    (["--args", "[]"], r"tests\.app\.jobs\.add\(\): missing a required argument: 'a'"),
    (["--args", "[1, 2, 3]"], "too many positional arguments"),
    (["--args", "[1]", "--kwargs", '{"c": 1}'], "unexpected keyword argument 'c'"),
])
def test_put_args_are_checked_against_the_function_signature(args, message):
    with pytest.raises(CommandError, match=message):
        put("tests.app.jobs.add", *args)
    assert get_client().queues["default"].counts["waiting"] == 0


def test_put_args_that_fit_the_signature_are_put():
    jid = put("tests.app.jobs.send_mail", "--args", '["a@b.c"]', "--kwargs",
              '{"subject": "x"}')
    assert get_client().jobs[jid].data == {"args": ["a@b.c"], "kwargs": {"subject": "x"}}
    # A job class takes any JSON object: no signature to check.
    assert put("tests.app.jobs.Thumbnail", "--data", '{"width": 3}')


def test_settings_is_accepted_after_the_action(redis_url):
    env = {**command_env(redis_url), "DJANGO_SETTINGS_MODULE": "no_such_settings_module"}
    result = subprocess.run([sys.executable, "-m", "django", "qless", "stats", "--json",
                             "--settings", "tests.app.settings"], cwd=ROOT, env=env, text=True,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    result = manage(redis_url, "qless", "list", "default", "-v", "0", "--traceback")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("action", [["stats"], ["list", "default"], ["failed"],
                                    ["config", "get"], ["get", "abc"]])
def test_an_unknown_alias_is_one_line_and_exit_2(redis_url, action):
    result = manage(redis_url, "qless", *action, "--alias", "nope")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "CommandError: Unknown qless alias 'nope': define QLESS['nope'] (known: default)."]
