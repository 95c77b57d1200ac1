"""A rediss:// alias against a real TLS Redis: certificates are verified unless allowed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from django_qless.clients import get_client
from tests.app import jobs
from tests.helpers import free_port
from testservers.redis_server import find_redis_server


def make_certs(path: Path) -> None:
    """A throwaway CA and a server certificate for 127.0.0.1."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=path, check=True, capture_output=True)

    # Python 3.13 verifies strictly (X509_STRICT): the CA needs key usage, the leaf needs
    # key identifiers, as real CAs issue them.
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    (path / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "server.pem")


@pytest.fixture
def tls_redis(tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    binary = find_redis_server()
    make_certs(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(tmp_path / "server.pem"),
         "--tls-key-file", str(tmp_path / "server.key"),
         "--tls-ca-cert-file", str(tmp_path / "ca.pem"), "--tls-auth-clients", "no",
         "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                pytest.skip(f"this redis-server has no TLS support: {proc.stderr.read()[:200]!r}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "TLS redis did not start"
                time.sleep(0.05)
        yield f"rediss://127.0.0.1:{port}/0", tmp_path / "ca.pem"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()


@pytest.mark.django_db(transaction=True)
def test_tls_alias_verifies_the_server_certificate(tls_redis):
    url, ca = tls_redis
    with override_settings(QLESS={"default": {"URL": url, "SSL_CA_CERTS": str(ca)}}):
        handle = jobs.add.enqueue(1, b=2)
        assert get_client().jobs[handle.jid].data["args"] == [1]
    with override_settings(QLESS={"default": {"URL": url}}):
        # Same server, no CA given: the self-signed chain must be refused.
        with pytest.raises((redis.ConnectionError, ConnectionError), match="(?i)certificate"):
            jobs.add.enqueue(1)
    with override_settings(QLESS={"default": {"URL": url, "SSL_CERT_REQS": "none"}}):
        assert jobs.add.enqueue(3).status == "enqueued"  # explicitly allowed
