"""The process-wide seams integrations install themselves in: put middleware and hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from django_qless.core import integrations
from django_qless.core.integrations import TRACE_KEY, PendingPut
from django_qless.core.workers.runner import CompositeHooks, WorkerHooks


class Recorder:
    """Put middleware that notes its calls and adds a header."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def middleware(self, put: PendingPut, call_next: Callable[[], str]) -> str:
        self.log.append(f"{self.name} in")
        put.add_headers({"baggage": f"{self.name}=1", self.name: "yes"})
        try:
            return call_next()
        finally:
            self.log.append(f"{self.name} out")


@pytest.fixture
def log() -> Iterator[list[str]]:
    calls: list[str] = []
    yield calls
    assert not integrations.put_middleware() and not integrations.installed_hooks()


def test_put_middleware_nests_in_order_and_its_headers_go_into_the_data(log: list[str]) -> None:
    outer, inner = Recorder("outer", log), Recorder("inner", log)
    integrations.install_put_middleware(outer.middleware)
    integrations.install_put_middleware(inner.middleware)
    integrations.install_put_middleware(outer.middleware)  # a repeat is ignored
    sent: list[Mapping[str, Any]] = []
    try:
        put = PendingPut(queue=None, klass="k", jid="j", data={"n": 1})  # type: ignore[arg-type]
        assert integrations.around_put(put, lambda data: sent.append(data) or "j") == "j"
    finally:
        integrations.uninstall_put_middleware(outer.middleware)
        integrations.uninstall_put_middleware(inner.middleware)
    assert log == ["outer in", "inner in", "inner out", "outer out"]
    assert sent == [{"n": 1, TRACE_KEY: {"baggage": "outer=1,inner=1", "outer": "yes",
                                         "inner": "yes"}}]
    assert put.data == {"n": 1}  # the caller's data is not changed


def test_no_headers_leave_the_data_as_it_was(log: list[str]) -> None:
    def quiet(put: PendingPut, call_next: Callable[[], str]) -> str:
        return call_next()

    integrations.install_put_middleware(quiet)
    data = {"n": 1}
    sent: list[Mapping[str, Any]] = []
    try:
        put = PendingPut(queue=None, klass="k", jid="j", data=data)  # type: ignore[arg-type]
        integrations.around_put(put, lambda d: sent.append(d) or "j")
    finally:
        integrations.uninstall_put_middleware(quiet)
    assert sent == [data] and sent[0] is data


def test_installed_hooks_wrap_the_hooks_a_worker_is_given(log: list[str]) -> None:
    mine, given = WorkerHooks(), WorkerHooks()
    assert integrations.with_installed_hooks(given) is given  # nothing installed
    integrations.install_hooks(mine)
    try:
        hooks = integrations.with_installed_hooks(given)
    finally:
        integrations.uninstall_hooks(mine)
    assert isinstance(hooks, CompositeHooks) and hooks.hooks == (mine, given)
