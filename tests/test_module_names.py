"""A module-level function or class defined twice silently replaces the first one (a
verdict rule named like the measurement it judges once broke the concurrency
experiment on a GPU): every package module defines each top-level name once."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "fullpipe"
MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_top_level_name_is_defined_twice(path):
    seen: dict[str, int] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            assert node.name not in seen, (
                f"{path.name}:{node.lineno} defines {node.name} again (first at line {seen[node.name]})")
            seen[node.name] = node.lineno
