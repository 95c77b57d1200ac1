"""The settings package imports one way: each module only imports the ones before it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import django_qless.conf
from tests.app.helpers import ROOT

PACKAGE = Path(django_qless.conf.__file__).resolve().parent
# The import order: a module may import only modules listed before it.
ORDER = ("model", "reporter", "cluster", "aliases", "parser", "__init__")


def imported_modules(path: Path) -> set[str]:
    """Return every module a source file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_every_module_of_the_package_has_a_place_in_the_order():
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(ORDER)


def test_each_module_imports_only_the_modules_before_it():
    for index, name in enumerate(ORDER):
        imports = imported_modules(PACKAGE / f"{name}.py")
        inside = {m.split(".")[2] for m in imports if m.startswith("django_qless.conf.")}
        if "django_qless.conf" in imports:
            inside.add("__init__")
        later = inside & set(ORDER[index:])
        assert not later, f"conf.{name} imports conf.{', conf.'.join(sorted(later))}"
        glue = {m for m in imports if m.startswith("django_qless.")
                and not m.startswith(("django_qless.conf", "django_qless.core"))}
        assert not glue, f"conf.{name} imports the glue: {sorted(glue)}"


def test_each_module_imports_first_in_a_fresh_interpreter():
    procs = {name: subprocess.Popen(
        [sys.executable, "-c", f"import django_qless.conf.{name}"
         if name != "__init__" else "import django_qless.conf"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.app.settings"})
        for name in ORDER}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"conf.{name}: {err}"
