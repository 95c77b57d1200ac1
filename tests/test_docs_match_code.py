"""The guides that name code name code that exists: modules, classes, functions, methods."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_qless"
# Where a bare file name in a guide may live (the guide says which layer it is in).
BASES = [ROOT, PACKAGE, PACKAGE / "core", PACKAGE / "core" / "workers", PACKAGE / "lua",
         PACKAGE / "core" / "integrations",
         PACKAGE / "management" / "commands"]
GUIDES = ["docs/architecture.md", "docs/client-api.md"]
CODE = re.compile(r"`([^`\s]+)`")
FILE = re.compile(r"^[\w/]+\.(py|lua)$")
# `Name.method()`, `function()`, `Class.method`: a call or an attribute of a capitalised name
CALLABLE = re.compile(r"^(?:[A-Z]\w*\.)?[a-z_]\w*\(\)$|^[A-Z]\w*\.[a-z_]\w*$")


@cache
def defined() -> frozenset[str]:
    """Every function, class and `Class.method` defined in the package (Lua: `function`s)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(f"{node.name}.{item.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
    for path in PACKAGE.rglob("*.lua"):
        for match in re.finditer(r"function\s+([\w.:]+)\s*\(", path.read_text()):
            name = match.group(1).replace(":", ".")
            names.update({name, name.split(".")[-1]})
    return frozenset(names)


def references(guide: str) -> list[str]:
    """The code spans of a guide, outside fenced blocks of shell commands."""
    return CODE.findall((ROOT / guide).read_text())


@pytest.mark.parametrize("guide", GUIDES)
def test_every_named_file_exists(guide: str) -> None:
    """Each `file.py` / `dir/file.lua` a guide names exists in one of the layers."""
    missing = sorted({ref for ref in references(guide) if FILE.match(ref)
                      and not any((base / ref).exists() for base in BASES)})
    assert not missing, f"{guide} names files that do not exist: {missing}"


@pytest.mark.parametrize("guide", GUIDES)
def test_every_named_function_exists(guide: str) -> None:
    """Each `Class.method()` / `function()` a guide names is defined in the package."""
    names = defined()
    missing = []
    for ref in references(guide):
        if not CALLABLE.match(ref):
            continue
        name = ref.removesuffix("()")
        if name not in names:
            missing.append(ref)
    assert not missing, f"{guide} names code that does not exist: {sorted(set(missing))}"
