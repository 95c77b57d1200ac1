"""The ``qless_keyspace`` fixture: a clean keyspace per test, never someone else's server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import entry_points

import pytest
from django.test import override_settings

from django_qless.clients import get_client
from django_qless.testing import TEST_MARK, NotATestServer, flush_keyspace
from tests.app import jobs
from tests.app.helpers import ROOT, command_env

pytestmark = pytest.mark.django_db(transaction=True)

# Two tests as a user writes them: the first leaves a scheduled retry behind.
USER_TESTS = textwrap.dedent('''
    import pytest
    from django_qless.clients import get_client
    from tests.app import jobs

    pytestmark = [pytest.mark.django_db(transaction=True), {marks}]

    def test_first_leaves_a_retry_scheduled():
        jobs.add.enqueue_in(3600, 1)

    def test_second_sees_a_clean_queue():
        assert get_client().queues["default"].counts["scheduled"] == 0
''')


def run_user_tests(tmp_path, redis_url, marks: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(USER_TESTS.format(marks=marks))
    env = command_env(redis_url)
    # The fixture comes from the installed package's pytest11 entry point, as for users
    # (named explicitly only in a checkout installed before the entry point existed).
    installed = any(e.value == "django_qless.pytest_plugin"
                    for e in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "django_qless.pytest_plugin"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
         "--ds", "tests.app.settings", "-o", "addopts=",
         "--rootdir", str(tmp_path), str(tmp_path / "test_user.py")],
        cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120)


@pytest.mark.timeout(240)
def test_without_the_fixture_tests_leak_and_with_it_they_do_not(tmp_path, redis_url, r):
    leaky = run_user_tests(tmp_path, redis_url, "pytest.mark.usefixtures()")
    assert leaky.returncode == 1 and "1 failed, 1 passed" in leaky.stdout, leaky.stdout
    fixture = 'pytest.mark.usefixtures("qless_keyspace")'
    refused = run_user_tests(tmp_path, redis_url, fixture)  # data it did not write
    assert refused.returncode == 1 and "not written by tests" in refused.stdout
    r.flushdb()  # emptied once by hand, as the refusal says
    for _ in range(2):  # the second run finds the first one's marked keyspace
        clean = run_user_tests(tmp_path, redis_url, fixture)
        assert clean.returncode == 0 and "2 passed" in clean.stdout, clean.stdout


def test_the_plugin_is_declared_as_a_pytest11_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"django_qless": "django_qless.pytest_plugin"}


def test_flush_empties_the_keyspace_and_marks_it():
    client = get_client()
    client.config[TEST_MARK] = 1  # as a previous flush left it
    jobs.add.enqueue_in(60, 1)
    jobs.echo.enqueue("x")
    assert flush_keyspace() > 0
    assert client.queues["default"].counts["scheduled"] == 0
    assert client.queues.counts == [] and client.config.get(TEST_MARK) is not None
    assert flush_keyspace() == 1  # only the mark itself was left


def test_flush_refuses_data_it_did_not_mark():
    jobs.echo.enqueue("someone's job")
    with pytest.raises(NotATestServer, match="not written by tests"):
        flush_keyspace()
    assert get_client().queues["other"].counts["waiting"] == 1


def test_flush_refuses_a_remote_server_without_connecting(monkeypatch):
    remote = {"default": {"URL": "redis://:pw@redis.example.com:6379/0"}}
    with override_settings(QLESS=remote):
        with pytest.raises(NotATestServer, match="not a local server") as info:
            flush_keyspace()
        assert "pw" not in str(info.value)
        monkeypatch.setenv("QLESS_TEST_HOSTS", "ci-redis")
        with pytest.raises(NotATestServer):
            flush_keyspace()


@pytest.mark.timeout(180)
def test_flush_empties_every_shard_of_a_cluster_alias(redis_cluster):
    from django_qless.clients import clients
    from tests.app.test_cluster_django import cluster_qless

    redis_cluster.heal()
    redis_cluster.flush()
    clients.close_all()
    try:
        with override_settings(QLESS=cluster_qless(redis_cluster)):
            sharded = get_client()
            flush_keyspace()  # empty shards: allowed, and marked
            for queue in ("default", "other", "emails"):
                sharded.for_queue(queue).queues[queue].put("tests.app.jobs.add", {}, delay=60)
            assert flush_keyspace() > 3
            assert all(s.queues.counts == [] for s in sharded.clients())
            assert all(s.config.get(TEST_MARK) is not None for s in sharded.clients())
    finally:
        clients.close_all()
