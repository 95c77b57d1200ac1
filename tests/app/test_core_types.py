"""The core's public types: every deployment client is a QlessClient."""

from __future__ import annotations

import inspect
import subprocess
import sys

from django_qless.clients import get_client
from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.types import QlessClient
from tests.app.helpers import ROOT

MEMBERS = sorted(n for n in vars(QlessClient) if not n.startswith("_"))


def test_the_protocol_names_what_the_glue_and_the_worker_use_of_a_deployment():
    assert MEMBERS == ["clients", "close", "disconnect", "find_job", "for_queue",
                       "schedules", "serving", "throttle_client", "worker_name"]


def test_a_single_server_client_is_a_qless_client(redis_url):
    client = get_client()
    assert isinstance(client, Client) and isinstance(client, QlessClient)
    assert client.clients() == [client] and client.for_queue("q") is client
    assert client.serving("q") == [client]


def test_a_sharded_client_has_every_member_with_a_compatible_signature():
    for name in MEMBERS:
        wanted, found = getattr(QlessClient, name), getattr(ShardedClient, name)
        if isinstance(wanted, property):
            assert isinstance(found, property), name
            continue
        expected = list(inspect.signature(wanted).parameters)
        assert list(inspect.signature(found).parameters)[:len(expected)] == expected, name


def test_importing_the_types_loads_no_client_module():
    code = ("import sys, django_qless.core.types; "
            "assert 'django_qless.core.client' not in sys.modules; "
            "assert 'django' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
