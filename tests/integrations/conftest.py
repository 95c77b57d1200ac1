"""Fixtures: the real sentry-sdk with an in-memory transport, the real OpenTelemetry SDK with
an in-memory exporter, and a serial worker run in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_qless.core import integrations
from django_qless.core.registry import default_registry
from django_qless.core.workers import SerialWorker, WorkerConfig
from tests.helpers import WorkerProcess
from tests.integrations.support import DSN, MemoryTransport


@pytest.fixture
def sentry_init() -> Iterator[Callable[..., MemoryTransport]]:
    """Initialise sentry-sdk with QlessIntegration(**options); return its transport."""
    import sentry_sdk

    from django_qless.core.integrations.sentry import QlessIntegration

    def init(**options: Any) -> MemoryTransport:
        transport = MemoryTransport()
        sentry_sdk.init(dsn=DSN, transport=transport, traces_sample_rate=1.0,
                        auto_enabling_integrations=False, data_collection={"queues": True},
                        integrations=[QlessIntegration(**options)])
        # sentry-sdk sets an integration up once per process: install it again after a
        # previous test's teardown removed it.
        QlessIntegration.setup_once()
        return transport

    yield init
    QlessIntegration.uninstall()
    sentry_sdk.get_client().close()
    sentry_sdk.init()
    assert not integrations.put_middleware() and not integrations.installed_hooks()


@pytest.fixture
def otel() -> Iterator[Any]:
    """Instrument with an in-memory exporter; yield (exporter, tracer for the test)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from django_qless.core.integrations.otel import QlessInstrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = QlessInstrumentor()
    assert instrumentor.instrument(tracer_provider=provider)
    yield exporter, provider.get_tracer("tests")
    instrumentor.uninstrument()
    provider.shutdown()
    assert not integrations.put_middleware() and not integrations.installed_hooks()


@pytest.fixture
def run_worker(redis_url: str, tmp_path: Path) -> Callable[..., None]:
    """Run a serial worker in this process until it has run `max_jobs` jobs."""

    def run(*queues: str, max_jobs: int = 1, connect: Any = None, **config: Any) -> None:
        options: dict[str, Any] = {"connect": connect} if connect is not None else {
            "url": redis_url}
        options.update(config)
        config = WorkerConfig(queues=queues, processes=0, registry=default_registry,
                              name="obs-worker", max_jobs=max_jobs,
                              sandbox_root=str(tmp_path / "sandboxes"), **options)
        SerialWorker(config, install_signals=False).run_forever()

    return run


@pytest.fixture
def cluster(redis_cluster: Any) -> Any:
    """The session's Redis cluster, whole again and flushed."""
    redis_cluster.heal()
    redis_cluster.flush()
    return redis_cluster


@pytest.fixture
def cli_worker(redis_url: str, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Callable[..., int]:
    """Run `python -m django_qless.core.workers ARGS` (jobs and set-up from
    tests/integrations/jobs.py, with `env` added) until it exits 0; return its pid."""

    def run(*args: str, env: dict[str, Any]) -> int:
        for name, value in env.items():
            monkeypatch.setenv(name, str(value))
        worker = WorkerProcess(redis_url, list(args), tmp_path,
                               jobs_module="tests.integrations.jobs")
        try:
            assert worker.wait(30) == 0
        finally:
            worker.kill_all()
        return worker.pid

    return run
