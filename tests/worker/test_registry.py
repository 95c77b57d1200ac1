"""The registry: klass names are lookup keys; imports only under allowed module prefixes."""

from __future__ import annotations

import sys
import types

import pytest

from django_qless.core.exceptions import UnregisteredJobClass
from django_qless.core.registry import Registry, klass_name_of


class FakeJob:
    def __init__(self, queue: str = "q") -> None:
        self.queue_name = queue
        self.calls: list[str] = []


class QlessStyle:
    @staticmethod
    def images(job: FakeJob) -> str:
        return "images"

    @classmethod
    def process(cls, job: FakeJob) -> str:
        return "process"

    def mro_trap(self, job: FakeJob) -> str:  # a plain method: never routed by queue name
        return "trap"


class InstanceProcess:
    def process(self, job: FakeJob) -> str:
        return f"instance {type(self).__name__}"


def handler(job: FakeJob) -> str:
    return "handler"


def test_register_and_resolve_default_names():
    reg = Registry()
    reg.register(None, handler)
    reg.register(None, QlessStyle)
    assert klass_name_of(handler) == f"{__name__}.handler"
    assert reg.resolve(f"{__name__}.handler").perform(FakeJob()) == "handler"
    entry = reg.resolve(f"{__name__}.QlessStyle")
    assert entry.handler("images")(FakeJob("images")) == "images"
    assert entry.handler("other")(FakeJob("other")) == "process"
    # A queue name never reaches plain methods, dunders or inherited object attributes.
    for queue in ("mro_trap", "__init__", "__class__", "mro", "_private"):
        assert entry.handler(queue)(FakeJob(queue)) == "process"


def test_instance_process_method_gets_a_fresh_instance():
    reg = Registry()
    reg.register("ip", InstanceProcess)
    assert reg.resolve("ip").perform(FakeJob()) == "instance InstanceProcess"


def test_decorator_and_duplicate_names():
    reg = Registry()

    @reg.job("custom.name")
    def fn(job: FakeJob) -> str:
        return "fn"

    assert "custom.name" in reg and reg.names() == ["custom.name"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("custom.name", handler)
    reg.register("custom.name", handler, replace=True)
    assert reg.resolve("custom.name").perform(FakeJob()) == "handler"
    with pytest.raises(ValueError):
        reg.register("", handler)
    with pytest.raises(TypeError):
        reg.register("x", 42)


def test_unknown_names_are_refused_without_importing(monkeypatch):
    reg = Registry()
    imported: list[str] = []
    real_import = __import__

    def spy(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", spy)
    for name in ("os.system", "subprocess.Popen", "json.loads", "nonexistent.mod.Job", ""):
        with pytest.raises(UnregisteredJobClass):
            reg.resolve(name)
    assert "nonexistent" not in " ".join(imported)
    assert "nonexistent.mod" not in sys.modules


def test_allowed_prefix_imports_only_under_the_prefix(monkeypatch):
    pkg = types.ModuleType("allowedjobs")
    pkg.__path__ = []  # a package
    mod = types.ModuleType("allowedjobs.tasks")

    class Resize:
        @staticmethod
        def process(job: FakeJob) -> str:
            return "resized"

    Resize.__module__ = "allowedjobs.tasks"
    mod.Resize = Resize  # type: ignore[attr-defined]
    mod._hidden = Resize  # type: ignore[attr-defined]
    mod.CONSTANT = 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "allowedjobs", pkg)
    monkeypatch.setitem(sys.modules, "allowedjobs.tasks", mod)
    reg = Registry(allow_module_prefixes=["allowedjobs"])
    assert reg.resolve("allowedjobs.tasks.Resize").perform(FakeJob()) == "resized"
    assert reg.is_allowed("allowedjobs.tasks.Anything")
    for bad in ("allowedjobs.tasks._hidden", "allowedjobs.tasks.CONSTANT",
                "allowedjobs.tasks.Missing", "allowedjobsevil.tasks.X", "allowedjobs"):
        with pytest.raises(UnregisteredJobClass):
            reg.resolve(bad)
    with pytest.raises(ValueError):
        reg.allow_module_prefixes("not a module")


def test_per_job_middleware_is_kept_on_the_entry():
    reg = Registry()

    def mw(job, call_next):
        return call_next()

    reg.register("with.mw", handler, middleware=[mw])
    assert reg.resolve("with.mw").middleware == (mw,)
