"""System checks: they name the bad key and the fix; --deploy pings Redis."""

from __future__ import annotations

from django.core import checks
from django.test import override_settings

from django_qless.checks import check_deploy, check_engine, check_job_modules, check_settings
from testservers.redis_server import RedisServer, find_redis_server


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_valid_settings_pass(redis_url):
    assert check_settings() == []
    assert check_engine() == []
    assert check_job_modules() == []


def test_bad_settings_are_errors_with_key_and_hint():
    with override_settings(QLESS={"default": {"URL": "http://x"}, "COMMIT_MODE": "later"}):
        found = check_settings()
    assert {m.id for m in found} == {"django_qless.E011", "django_qless.E055"}
    url = next(m for m in found if m.id == "django_qless.E011")
    assert url.obj == "QLESS['default']['URL']" and "rediss://" in url.hint
    assert all(m.level == checks.ERROR for m in found)


def test_checks_run_through_the_framework_and_do_no_io():
    # An unreachable host: normal checks must not try to connect.
    with override_settings(QLESS={"default": {"URL": "redis://203.0.113.1:6379/0"}}):
        messages = checks.run_checks(tags=["django_qless"])
    assert [m for m in messages if m.id.startswith("django_qless")] == []


def test_missing_job_module_is_a_warning():
    with override_settings(QLESS={"default": {"URL": "redis://h/0"},
                                  "JOB_MODULES": ["no_such_pkg.jobs"]}):
        found = check_job_modules()
    assert ids(found) == ["django_qless.W060"] and "no_such_pkg.jobs" in found[0].msg


def test_insecure_tls_is_a_warning():
    with override_settings(QLESS={"default": {"URL": "rediss://h/0", "SSL_CERT_REQS": "none"}}):
        assert ids(check_settings()) == ["django_qless.W027"]


def test_deploy_check_pings_and_accepts_noeviction(redis_url):
    assert check_deploy() == []


def test_deploy_check_reports_unreachable_redis(tmp_path):
    url = f"unix://{tmp_path}/nothing.sock?db=0"
    with override_settings(QLESS={"default": {"URL": url}}):
        found = check_deploy()
    assert ids(found) == ["django_qless.E081"]


def test_deploy_check_refuses_eviction_policy():
    server = RedisServer(find_redis_server(), extra_args=["--maxmemory-policy", "allkeys-lru"])
    server.start()
    try:
        with override_settings(QLESS={"default": {"URL": server.url}, "EAGER": True}):
            found = check_deploy()
        assert set(ids(found)) == {"django_qless.E082", "django_qless.W080"}
        assert "allkeys-lru" in next(m.msg for m in found if m.id == "django_qless.E082")
    finally:
        server.stop()


def test_deploy_check_is_registered_for_deploy_only(redis_url):
    registered = checks.registry.registry.get_checks(include_deployment_checks=True)
    assert check_deploy in registered
    assert check_deploy not in checks.registry.registry.get_checks()


def test_deploy_flags_remote_redis_without_password_or_tls():
    from django_qless.checks import _connection_warnings
    from django_qless.settings import get_settings

    cases = {
        "redis://cache.example.com:6379/0": {"django_qless.W083", "django_qless.W084"},
        "redis://:s3cret@cache.example.com:6379/0": {"django_qless.W084"},
        "rediss://user:s3cret@cache.example.com:6380/0": set(),
        "redis://127.0.0.1:6379/0": set(),
        "unix:///run/redis.sock?db=0": set(),
    }
    for url, expected in cases.items():
        # No network: these only read the parsed settings.
        with override_settings(QLESS={"default": {"URL": url}}):
            alias = get_settings().aliases["default"]
            found = _connection_warnings("default", "QLESS['default']", alias)
        assert set(ids(found)) == expected, url
        assert all("s3cret" not in m.msg for m in found)
