"""The cluster form of a QLESS alias: parsed values, the environment form, and one check per
mistake (each with its id, the key it names and a hint). No server is needed."""

from __future__ import annotations

import environ
import pytest
from django.test import override_settings

from django_qless.checks import check_settings
from django_qless.conf import parse

NODES = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]


def env(**values: str) -> environ.Env:
    """An Env reading only the given variables."""
    e = environ.Env()
    e.ENVIRON = dict(values)
    return e


def problems(raw, **environ_values):
    return parse(raw, env(**environ_values))[1]


def ok(raw, **environ_values):
    conf, found = parse(raw, env(**environ_values))
    assert [p for p in found if not p.warning] == []
    return conf


def test_cluster_alias_parses_every_key():
    conf = ok({"default": {"CLUSTER": NODES, "SHARDS": 32,
                           "PLACEMENT": {"reports": 3, "emails": "s1", "pdf": "s1-1366"},
                           "DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": 0.25}})
    alias = conf.aliases["default"]
    assert alias.url is None and alias.cluster is not None
    assert alias.cluster.nodes == tuple(NODES) and alias.cluster.shards == 32
    assert alias.cluster.addresses == [("10.0.0.1", 7000), ("10.0.0.2", 7000)]
    assert alias.cluster.placement == {"reports": 3, "emails": "s1", "pdf": "s1-1366"}
    assert alias.cluster.durable_replicas == 1 and alias.cluster.durable_timeout_ms == 250
    assert alias.display == "redis://10.0.0.1:7000,10.0.0.2:7000 (cluster, 32 shards)"
    assert alias.scheme == "redis"


def test_cluster_defaults():
    cluster = ok({"default": {"CLUSTER": NODES[:1]}}).aliases["default"].cluster
    assert cluster is not None
    assert (cluster.shards, dict(cluster.placement), cluster.durable_replicas,
            cluster.durable_timeout_ms) == (16, {}, 0, 1000)


def test_tls_and_acl_apply_to_every_node_and_keys_win_over_urls():
    conf = ok({"default": {"CLUSTER": ["rediss://qless:pw@h1:7000", "rediss://qless:pw@h2:7000"],
                           "SSL_CA_CERTS": "/etc/ca.pem"}})
    alias = conf.aliases["default"]
    assert alias.scheme == "rediss" and alias.ssl_ca_certs == "/etc/ca.pem"
    assert (alias.username, alias.password) == ("qless", "pw")
    assert "pw" not in repr(alias) and "pw" not in alias.display
    alias = ok({"default": {"CLUSTER": ["redis://u:old@h1:7000"], "USERNAME": "qless",
                            "PASSWORD": "new"}}).aliases["default"]
    assert (alias.username, alias.password) == ("qless", "new")


def test_environment_cluster_comma_list():
    conf = ok({"reports": {"SHARDS": 8}},
              QLESS_CLUSTER="redis://h1:7000,redis://h2:7000",
              QLESS_REPORTS_CLUSTER="rediss://r1:7000", QLESS_REPORTS_PASSWORD="pw")
    assert conf.aliases["default"].cluster.nodes == ("redis://h1:7000", "redis://h2:7000")
    reports = conf.aliases["reports"]
    assert reports.cluster.nodes == ("rediss://r1:7000",) and reports.cluster.shards == 8
    assert reports.password == "pw"
    # A value written in QLESS wins over the environment, as for URL.
    conf = ok({"default": {"URL": "redis://one/0"}}, QLESS_CLUSTER="redis://h1:7000")
    assert conf.aliases["default"].cluster is None


def by_id(raw, **environ_values) -> dict[str, list]:
    found: dict[str, list] = {}
    for p in problems(raw, **environ_values):
        found.setdefault(p.id.removeprefix("django_qless."), []).append(p)
    return found


@pytest.mark.parametrize(("raw", "env_values", "code", "key", "needle"), [
    ({"CLUSTER": NODES, "URL": "redis://h/0"}, {}, "E100", "QLESS['default']",
     "CLUSTER together with URL"),
    ({"CLUSTER": NODES, "SENTINELS": [("s", 26379)], "MASTER_NAME": "m"}, {}, "E100",
     "QLESS['default']", "CLUSTER together with SENTINELS"),
    ({"CLUSTER": []}, {}, "E101", "QLESS['default']['CLUSTER']", "non-empty list"),
    ({"CLUSTER": "redis://h1:7000"}, {}, "E101", "QLESS['default']['CLUSTER']",
     "non-empty list"),
    ({"CLUSTER": [7000]}, {}, "E101", "QLESS['default']['CLUSTER']", "URL strings"),
    ({"CLUSTER": ["unix:///run/redis.sock"]}, {}, "E102", "QLESS['default']['CLUSTER']",
     "not unix sockets"),
    ({"CLUSTER": ["http://h1:7000"]}, {}, "E102", "QLESS['default']['CLUSTER']",
     "scheme 'http'"),
    ({"CLUSTER": ["redis://h1:notaport"]}, {}, "E103", "QLESS['default']['CLUSTER']",
     "valid host:port"),
    ({"CLUSTER": ["redis://:7000"]}, {}, "E103", "QLESS['default']['CLUSTER']",
     "valid host:port"),
    ({"CLUSTER": ["redis://h1:7000/2"]}, {}, "E104", "QLESS['default']['CLUSTER']",
     "database '2'"),
    ({"CLUSTER": ["redis://h1:7000", "rediss://h2:7000"]}, {}, "E105",
     "QLESS['default']['CLUSTER']", "mixes the schemes"),
    ({"CLUSTER": ["redis://a:x@h1:7000", "redis://a:y@h2:7000"]}, {}, "E106",
     "QLESS['default']['CLUSTER']", "different credentials"),
    ({"CLUSTER": NODES, "SHARDS": "16"}, {}, "E107", "QLESS['default']['SHARDS']",
     "from 1 to 1024"),
    ({"CLUSTER": NODES, "SHARDS": 0}, {}, "E107", "QLESS['default']['SHARDS']",
     "from 1 to 1024"),
    ({"CLUSTER": NODES, "SHARDS": 1025}, {}, "E107", "QLESS['default']['SHARDS']",
     "from 1 to 1024"),
    ({"CLUSTER": NODES, "PLACEMENT": ["reports"]}, {}, "E108",
     "QLESS['default']['PLACEMENT']", "must map queue names"),
    ({"CLUSTER": NODES, "PLACEMENT": {"bad name": 1}}, {}, "E108",
     "QLESS['default']['PLACEMENT']", "invalid queue name 'bad name'"),
    ({"CLUSTER": NODES, "SHARDS": 4, "PLACEMENT": {"q": 4}}, {}, "E109",
     "QLESS['default']['PLACEMENT']['q']", "indexes are 0-3"),
    ({"CLUSTER": NODES, "SHARDS": 4, "PLACEMENT": {"q": "s7"}}, {}, "E109",
     "QLESS['default']['PLACEMENT']['q']", "no shard s7"),
    ({"CLUSTER": NODES, "PLACEMENT": {"q": "s1-2"}}, {}, "E109",
     "QLESS['default']['PLACEMENT']['q']", "unknown tag"),
    ({"CLUSTER": NODES, "PLACEMENT": {"q": "east"}}, {}, "E109",
     "QLESS['default']['PLACEMENT']['q']", "not a shard name"),
    ({"CLUSTER": NODES, "PLACEMENT": {"q": 1.5}}, {}, "E109",
     "QLESS['default']['PLACEMENT']['q']", "not a shard index"),
    ({"CLUSTER": NODES, "DURABLE_REPLICAS": -1}, {}, "E110",
     "QLESS['default']['DURABLE_REPLICAS']", "integer >= 0"),
    ({"CLUSTER": NODES, "DURABLE_REPLICAS": "1"}, {}, "E110",
     "QLESS['default']['DURABLE_REPLICAS']", "integer >= 0"),
    ({"CLUSTER": NODES, "DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": 0}, {}, "E111",
     "QLESS['default']['DURABLE_TIMEOUT']", "> 0"),
    ({"CLUSTER": NODES, "DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": -2.0}, {}, "E111",
     "QLESS['default']['DURABLE_TIMEOUT']", "> 0"),
    ({"URL": "redis://h/0", "SHARDS": 16}, {}, "E112", "QLESS['default']['SHARDS']",
     "not a cluster alias"),
    ({"URL": "redis://h/0", "PLACEMENT": {"q": 1}}, {}, "E112",
     "QLESS['default']['PLACEMENT']", "not a cluster alias"),
    ({"DURABLE_REPLICAS": 1}, {"QLESS_URL": "redis://h/0"}, "E112",
     "QLESS['default']['DURABLE_REPLICAS']", "not a cluster alias"),
    ({}, {"QLESS_URL": "redis://h/0", "QLESS_CLUSTER": "redis://h1:7000"}, "E113",
     "QLESS['default']", "both QLESS_URL and QLESS_CLUSTER"),
    ({"CLUSTER": ["rediss://h1:7000?ssl_cert_reqs=none"]}, {}, "E015",
     "QLESS['default']['CLUSTER']", "disables TLS certificate verification"),
])
def test_each_cluster_mistake_is_one_error(raw, env_values, code, key, needle):
    found = by_id({"default": raw}, **env_values)
    assert list(found) == [code], found
    (problem,) = found[code]
    assert problem.key == key and needle in problem.message, problem
    assert problem.hint and not problem.warning


def test_durable_timeout_without_replicas_is_a_warning():
    found = by_id({"default": {"CLUSTER": NODES, "DURABLE_TIMEOUT": 2.0}})
    assert list(found) == ["W114"] and found["W114"][0].warning


def test_checks_report_cluster_mistakes_with_ids_and_hints():
    bad = {"default": {"CLUSTER": ["redis://h1:7000/1", "unix:///x.sock"], "SHARDS": 2048,
                       "PLACEMENT": {"q": "s3"}}}
    with override_settings(QLESS=bad):
        messages = check_settings()
    assert sorted(m.id for m in messages) == [
        "django_qless.E102", "django_qless.E104", "django_qless.E107"]
    assert all(m.hint for m in messages)
    with override_settings(QLESS={"default": {"CLUSTER": NODES, "SHARDS": 4,
                                              "PLACEMENT": {"q": "s3"}}}):
        assert check_settings() == []


def test_every_node_gets_the_tls_and_acl_arguments():
    from django_qless.clients import redis_kwargs

    alias = ok({"default": {"CLUSTER": ["rediss://h1:7000", "rediss://h2:7000"],
                            "USERNAME": "qless", "PASSWORD": "pw",
                            "SSL_CA_CERTS": "/etc/ca.pem", "SSL_CERTFILE": "/etc/c.pem",
                            "SSL_KEYFILE": "/etc/k.pem", "SOCKET_TIMEOUT": 3}}
               ).aliases["default"]
    kwargs = redis_kwargs(alias)
    assert kwargs["ssl"] is True and kwargs["ssl_cert_reqs"] == "required"
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == (
        "/etc/ca.pem", "/etc/c.pem", "/etc/k.pem")
    assert (kwargs["username"], kwargs["password"], kwargs["socket_timeout"]) == (
        "qless", "pw", 3)
    # The cluster client never retries on its own (a resent write could run twice).
    assert kwargs["retry"].get_retries() == 0 and kwargs["decode_responses"] is True
    plain = redis_kwargs(ok({"default": {"CLUSTER": ["redis://h1:7000"]}}).aliases["default"])
    assert "ssl" not in plain and "ssl_cert_reqs" not in plain


def test_a_qless_cluster_django_setting_is_reported_as_ignored():
    from django_qless.checks import check_stray_settings

    with override_settings(QLESS_CLUSTER="redis://h1:7000,redis://h2:7000"):
        (message,) = check_stray_settings()
    assert message.id == "django_qless.W062"
    assert 'QLESS = {"default": {"CLUSTER": ...}}' in message.hint


def test_a_pin_for_a_queue_routed_elsewhere_is_a_warning():
    raw = {"default": {"URL": "redis://one/0"},
           "sharded": {"CLUSTER": NODES, "PLACEMENT": {"reports": 1, "pdf": 2}},
           "QUEUES": {"pdf": "sharded"}}
    found = by_id(raw)
    assert list(found) == ["W115"]
    (problem,) = found["W115"]
    assert problem.key == "QLESS['sharded']['PLACEMENT']['reports']" and problem.warning
    assert "alias 'default'" in problem.message and '"reports": "sharded"' in problem.hint
