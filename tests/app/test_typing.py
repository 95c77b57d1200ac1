"""@job is typed with ParamSpec: mypy checks enqueue() arguments against the function."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.app.helpers import ROOT

SNIPPET = textwrap.dedent('''
    from datetime import timedelta
    from django_qless import job
    from django_qless.options import JobHandle

    @job(queue="q")
    def add(a: int, b: int = 0) -> int:
        return a + b

    @job
    def greet(name: str) -> str:
        return name

    @job
    class Klass:
        @staticmethod
        def process(job: object) -> None: ...

    ok1: JobHandle = add.enqueue(1, b=2)
    ok2: int = add(1)
    ok3 = add.using(priority=3).enqueue_in(timedelta(seconds=5), 1)
    ok4 = greet.recur(60, "x")
    ok5 = Klass.process
    bad1 = add.enqueue("one")          # line 24: wrong type
    bad2 = add.enqueue(1, c=3)         # line 25: unknown keyword
    bad3 = greet.enqueue()             # line 26: missing argument
    bad4: str = add(1)                 # line 27: return type
    bad5 = add.enqueue_at("5", 1)      # line 28: not a datetime nor epoch seconds
''')


@pytest.mark.slow
def test_mypy_checks_enqueue_arguments(tmp_path):
    pytest.importorskip("mypy")
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir=/dev/null", "--no-error-summary",
         "--hide-error-context", "--follow-imports=silent", "--ignore-missing-imports",
         str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=110)
    lines = {int(line.split(":")[1]) for line in result.stdout.splitlines()
             if line.startswith(str(path)) and ": error:" in line}
    assert lines == {24, 25, 26, 27, 28}, result.stdout


@pytest.mark.slow
def test_the_whole_package_is_mypy_strict_clean():
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "django_qless"],
        cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stdout
