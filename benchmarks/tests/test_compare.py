"""`run.py --compare-tree`: two checkouts measured side by side, each from its own files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import compare
import peers
import pytest
from report import aggregate

ROOT = Path(__file__).resolve().parents[2]


def _fake_tree(tmp_path: Path) -> Path:
    """A checkout whose adapter prints where it imported `django_qless` from."""
    (tmp_path / "django_qless").mkdir()
    (tmp_path / "django_qless" / "__init__.py").write_text("")
    adapters = tmp_path / "benchmarks" / "adapters"
    adapters.mkdir(parents=True)
    (adapters / "django_qless_.py").write_text(
        "import json, os, sys\nimport django_qless\n"
        "print(json.dumps({'package': os.path.dirname(django_qless.__file__), "
        "'cwd': os.getcwd(), 'argv': sys.argv[1:]}))\n")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    python = venv_bin / "python"  # this interpreter: its venv imports this tree's package
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return tmp_path


def test_a_checkouts_adapter_runs_from_that_tree_with_its_package(
        tmp_path: Path, redis_url: str) -> None:
    tree = _fake_tree(tmp_path)
    system = replace(peers.SYSTEMS[peers.OURS], name="old", tree=tree)
    sizes = {"enqueue": 1, "drain": 1, "worker": 1, "latency": 1, "scale": "1", "probe": 1,
             "scale_queues": 1, "body": "incr", "idle_seconds": 1, "idle_monitor": 1,
             "idle_samples": 1}
    out = peers.run_adapter(system, redis_url, "enqueue", sizes)
    assert out["package"] == str(tree / "django_qless")
    assert out["cwd"] == str(tree / "benchmarks" / "adapters")
    assert system.python == str(tree / ".venv" / "bin" / "python")


def test_a_checkout_whose_worker_would_import_another_tree_is_refused(tmp_path: Path) -> None:
    # (the fake tree's interpreter is this venv's, whose package is this tree's: a worker
    # started with only the adapters folder on PYTHONPATH would run this tree's code)
    with pytest.raises(SystemExit, match="would not come from"):
        peers.checkout(_fake_tree(tmp_path), install=False)
    with pytest.raises(SystemExit, match="not a checkout"):
        peers.checkout(tmp_path / "nowhere", install=False)


def test_checks_bound_instructions_both_ways_and_throughput_from_below() -> None:
    agg = aggregate({
        "old": [{"worker_1": {"jobs_per_s": 1000.0}, "worker_2": {"jobs_per_s": 1000.0}}],
        "new": [{"worker_1": {"jobs_per_s": 1300.0}, "worker_2": {"jobs_per_s": 940.0}}]})
    agg["old"][compare.INSTRUCTIONS] = {"median": 100_000.0, "values": [100_000.0]}
    agg["new"][compare.INSTRUCTIONS] = {"median": 96_000.0, "values": [96_000.0]}
    status = {c["check"]: c["status"] for c in compare.check(agg, "old", "new")}
    assert list(status.values()) == ["OUTSIDE", "ok", "OUTSIDE"]  # 0.96, 1.3 (faster), 0.94
    del agg["new"][compare.INSTRUCTIONS]
    assert compare.check(agg, "old", "new")[0]["status"] == "n/a"


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(),
                    reason="the tree has no .venv")
def test_a_tiny_compare_of_this_tree_against_itself(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--compare-tree", str(ROOT),
            "--jobs", "60", "--rounds", "1", "--no-save"]
    if not shutil.which("valgrind"):
        argv.append("--skip-worker-callgrind")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for name in ("old", "new"):
        assert f"{name:4} {ROOT} (" in out
        assert f"django_qless from {ROOT / 'django_qless'}" in out
    rows = {line[:40].strip(): line.split() for line in out.splitlines()}
    for label in ("enqueue, single put", "worker 1 proc, first->last",
                  "worker 2 procs, first->last", "latency p50 (idle worker)"):
        assert float(rows[label][-1]) > 0, rows[label]  # old, new and new / old
    if shutil.which("valgrind"):
        ratio = float(rows["Redis instructions/job (callgrind)"][-1])
        assert 0.8 < ratio < 1.25  # the same code, counted twice
    assert "checks (new / old, on the medians)" in out
