"""`make demo` installs the runtime only: Django and the embedded Redis, no test toolchain."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_installs_the_runtime_only(tmp_path: Path) -> None:
    """The pip install `make demo` runs names the django and embedded extras, nothing else."""
    plan = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=True).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and " -e " in line]
    assert installs, plan
    extras = {line.rpartition("'.[")[2].rstrip("]'") for line in installs}
    assert extras == {"django,embedded"}, installs
