"""Parsing of the QLESS setting: every URL form, env fallbacks, errors naming the key."""

from __future__ import annotations

import ssl

import environ
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_qless.clients import build_redis, get_client, get_client_for_queue, redis_kwargs
from django_qless.conf import get_settings, mask_url, parse


def env(**values: str) -> environ.Env:
    """An Env reading only the given variables."""
    e = environ.Env()
    e.ENVIRON = dict(values)
    return e


def ok(raw, **environ_values):
    conf, problems = parse(raw, env(**environ_values))
    assert [p for p in problems if not p.warning] == []
    return conf


def errors(raw, **environ_values) -> list[str]:
    return [f"{p.key}: {p.message}" for p in parse(raw, env(**environ_values))[1]
            if not p.warning]


def test_defaults_without_any_setting():
    conf = ok(None)
    assert conf.aliases["default"].url == "redis://localhost:6379/0"
    assert conf.commit_mode == "on_commit"
    assert conf.worker.queues == ("default",)
    assert conf.autodiscover is True and conf.eager is False


def test_env_fills_missing_urls_but_settings_win():
    conf = ok({"reports": {}}, QLESS_URL="redis://a:6379/1", QLESS_REPORTS_URL="redis://b/2")
    assert conf.aliases["default"].url == "redis://a:6379/1"
    assert conf.aliases["reports"].url == "redis://b/2"
    conf = ok({"default": {"URL": "redis://set:6379/0"}}, QLESS_URL="redis://env/0")
    assert conf.aliases["default"].url == "redis://set:6379/0"


def test_env_deployment_options():
    conf = ok({}, QLESS_COMMIT_MODE="immediate", QLESS_EAGER="true",
              QLESS_WORKER_QUEUES="a,b", QLESS_WORKER_PROCESSES="3",
              QLESS_WORKER_RESERVER="round-robin", QLESS_WORKER_HEARTBEAT="30",
              QLESS_DEFAULT_PASSWORD="unused", QLESS_PASSWORD="s3cret")
    assert conf.commit_mode == "immediate" and conf.eager is True
    assert conf.worker.queues == ("a", "b") and conf.worker.processes == 3
    assert conf.worker.reserver == "round-robin" and conf.worker.heartbeat == 30
    assert conf.aliases["default"].password == "s3cret"


def test_worker_prefetch_setting():
    assert ok({}).worker.prefetch is True
    assert ok({"WORKER": {"PREFETCH": False}}).worker.prefetch is False
    assert ok({}, QLESS_WORKER_PREFETCH="false").worker.prefetch is False
    assert ok({"WORKER": {"PREFETCH": True}}, QLESS_WORKER_PREFETCH="false").worker.prefetch
    assert any("PREFETCH" in e for e in errors({"WORKER": {"PREFETCH": "no"}}))


def test_worker_start_timeout_setting():
    assert ok({}).worker.start_timeout == 30.0
    assert ok({"WORKER": {"START_TIMEOUT": 2.5}}).worker.start_timeout == 2.5
    assert ok({}, QLESS_WORKER_START_TIMEOUT="0").worker.start_timeout == 0.0
    assert any("START_TIMEOUT" in e for e in errors({"WORKER": {"START_TIMEOUT": -1}}))


def test_bad_env_value_names_the_variable():
    assert any("QLESS_WORKER_PROCESSES" in e for e in errors({}, QLESS_WORKER_PROCESSES="x"))


def test_redis_url_with_acl_user_and_db():
    conf = ok({"default": {"URL": "redis://qless:pw@cache.example:6380/3"}})
    r = build_redis(conf.aliases["default"])
    kw = r.connection_pool.connection_kwargs
    assert (kw["host"], kw["port"], kw["db"]) == ("cache.example", 6380, 3)
    assert (kw["username"], kw["password"]) == ("qless", "pw")
    assert kw["decode_responses"] is True
    # Script calls that change state must never be re-sent by redis-py.
    assert r.get_retry()._retries == 0


def test_explicit_username_password_override_url():
    conf = ok({"default": {"URL": "redis://x:1/0", "USERNAME": "u", "PASSWORD": "p"}})
    kw = build_redis(conf.aliases["default"]).connection_pool.connection_kwargs
    assert (kw["username"], kw["password"]) == ("u", "p")
    assert "p" not in repr(conf.aliases["default"])


def test_rediss_verifies_certificates_by_default():
    conf = ok({"default": {"URL": "rediss://h:6380/0", "SSL_CA_CERTS": "/etc/ca.pem"}})
    r = build_redis(conf.aliases["default"])
    kw = r.connection_pool.connection_kwargs
    assert r.connection_pool.connection_class.__name__ == "SSLConnection"
    assert kw["ssl_cert_reqs"] == "required" and kw["ssl_ca_certs"] == "/etc/ca.pem"
    conn = r.connection_pool.make_connection()
    assert conn.cert_reqs == ssl.CERT_REQUIRED


def test_rediss_insecure_needs_explicit_setting():
    assert any("ssl_cert_reqs=none" in e
               for e in errors({"default": {"URL": "rediss://h/0?ssl_cert_reqs=none"}}))
    conf, problems = parse({"default": {"URL": "rediss://h/0", "SSL_CERT_REQS": "none"}},
                           env())
    assert [p.id for p in problems] == ["django_qless.W027"]
    conn = build_redis(conf.aliases["default"]).connection_pool.make_connection()
    assert conn.cert_reqs == ssl.CERT_NONE


def test_unix_socket_url(redis_url):
    conf = ok({"default": {"URL": redis_url}})
    r = build_redis(conf.aliases["default"])
    assert r.connection_pool.connection_class.__name__ == "UnixDomainSocketConnection"
    assert r.ping() is True


def test_sentinel_settings_build_a_sentinel_pool():
    conf = ok({"default": {"SENTINELS": [("10.0.0.1", 26379), ("10.0.0.2", 26379)],
                           "MASTER_NAME": "mymaster", "PASSWORD": "pw",
                           "SENTINEL_KWARGS": {"password": "spw"}}})
    alias = conf.aliases["default"]
    assert alias.scheme == "sentinel" and alias.display == (
        "sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster")
    r = build_redis(alias)
    pool = r.connection_pool
    assert type(pool).__name__ == "SentinelConnectionPool"
    assert pool.service_name == "mymaster"
    assert pool.connection_kwargs["password"] == "pw"
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["host"] for s in sentinels] == [
        "10.0.0.1", "10.0.0.2"]
    assert sentinels[0].connection_pool.connection_kwargs["password"] == "spw"


@pytest.mark.parametrize(("raw", "needle"), [
    ({"default": {"URL": "http://x/0"}}, "unsupported scheme 'http'"),
    ({"default": {"URL": "redis://x:notaport/0"}}, "invalid port"),
    ({"default": {"URL": "redis://x/abc"}}, "invalid database number"),
    ({"default": {"URL": "unix://"}}, "no socket path"),
    ({"default": {"URL": 42}}, "must be a string URL"),
    ({"default": {"URL": "redis://x/0", "SENTINELS": [("a", 1)], "MASTER_NAME": "m"}},
     "both URL and SENTINELS"),
    ({"default": {"SENTINELS": [("a", 1)]}}, "without MASTER_NAME"),
    ({"default": {"SENTINELS": ["a:1"], "MASTER_NAME": "m"}}, "(host, port)"),
    ({"default": {"URL": "redis://x/0", "TIMEOUT": 1}}, "unknown key 'TIMEOUT'"),
    ({"reports": {}}, "QLESS['reports'] has no URL"),
    ({"QUEUES": {"reports": "nope"}}, "unknown alias 'nope'"),
    ({"COMMIT_MODE": "later"}, "COMMIT_MODE"),
    ({"WORKER": {"PROCESSES": 0}}, "PROCESSES"),
    ({"WORKER": {"QUEUES": "default"}}, "non-empty list"),
    ({"WORKER": {"RESERVER": "random"}}, "RESERVER"),
    ({"JOB_MODULES": "app.jobs"}, "JOB_MODULES"),
    ({"EAGER": "yes"}, "EAGER"),
    ({"Default": {}}, "unknown key 'Default'"),
    ({"RECEIVERS": {"WEBHOOK_URL": "ftp://x"}}, "WEBHOOK_URL"),
    ("redis://x", "QLESS must be a dict"),
])
def test_invalid_settings_name_the_key(raw, needle):
    found = errors(raw)
    assert any(needle in e for e in found), found


def test_queue_routing_and_per_alias_eager():
    conf = ok({"default": {"URL": "redis://a/0"},
               "reports": {"URL": "redis://b/0", "EAGER": True},
               "QUEUES": {"pdf": "reports"}})
    assert conf.alias_for_queue("pdf") == "reports"
    assert conf.alias_for_queue("other") == "default"
    assert conf.is_eager("reports") is True and conf.is_eager("default") is False


def test_get_settings_raises_naming_the_key_and_override_clears_cache(redis_url):
    with override_settings(QLESS={"default": {"URL": "ftp://x"}}):
        with pytest.raises(ImproperlyConfigured, match=r"QLESS\['default'\]\['URL'\]"):
            get_settings()
    assert get_settings().aliases["default"].url == redis_url


def test_clients_are_cached_per_alias_and_routed_by_queue(redis_url, tmp_path):
    with override_settings(QLESS={"default": {"URL": redis_url},
                                  "reports": {"URL": redis_url.replace("db=0", "db=1")},
                                  "QUEUES": {"pdf": "reports"}}):
        assert get_client() is get_client("default")
        assert get_client_for_queue("pdf") is get_client("reports")
        assert get_client_for_queue("x") is get_client("default")
        assert get_client("reports").redis.connection_pool.connection_kwargs["db"] == 1
        with pytest.raises(ImproperlyConfigured, match="Unknown qless alias 'nope'"):
            get_client("nope")


def test_mask_url_hides_password():
    assert mask_url("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"
    assert mask_url("redis://h:1/0") == "redis://h:1/0"


def test_options_pass_through_to_redis():
    conf = ok({"default": {"URL": "redis://h/0", "OPTIONS": {"socket_connect_timeout": 2},
                           "SOCKET_TIMEOUT": 7}})
    kw = redis_kwargs(conf.aliases["default"])
    assert kw["socket_connect_timeout"] == 2 and kw["socket_timeout"] == 7


def test_password_setting_overrides_the_url_credentials():
    from django_qless.clients import build_redis
    from django_qless.conf import AliasSettings

    conn = build_redis(AliasSettings("x", "redis://olduser:urlpw@db.example.com:6379/0",
                                     username="app", password="setpw"))
    kwargs = conn.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("app", "setpw")
    plain = build_redis(AliasSettings("y", "redis://:urlpw@db.example.com:6379/0"))
    assert plain.connection_pool.connection_kwargs["password"] == "urlpw"


def test_a_password_in_the_query_is_masked_in_the_display_and_the_worker_logs():
    from django_qless.conf.model import mask_url
    from django_qless.core.worker_options import WorkerConfig

    url = "unix:///run/redis.sock?db=0&password=s3cret"
    assert mask_url(url) == "unix:///run/redis.sock?db=0&password=***"
    assert WorkerConfig(url=url).safe_url == "unix:///run/redis.sock?db=0&password=***"
    assert mask_url("unix:///run/redis.sock?db=1") == "unix:///run/redis.sock?db=1"
