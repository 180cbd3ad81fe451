"""The package's layers point down, and no module imports itself through others.

    cuda/  <-  product (pipeline/, kernels/, trace/, models/)  <-  experiments/  <-  report/  <-  cli

Every module under src/fullpipe is read with `ast`; every import counts, also those
inside functions and under `if TYPE_CHECKING:` (an import inside a function is still an
arrow: it runs on the first call, and it hides a cycle rather than removing it).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import fullpipe

PACKAGE_DIR = Path(fullpipe.__file__).resolve().parent
SRC_DIR = PACKAGE_DIR.parent

# Layer of each first component below `fullpipe` (a module directly in the package is
# named by its stem). Lower may not import higher; equal layers may import each other.
LAYERS = {
    "_version": 0, "errors": 0,            # leaves every layer may use
    "cuda": 1,
    "pipeline": 2, "kernels": 2, "trace": 2, "models": 2,
    "__init__": 2,                          # `import fullpipe`: the product's front door
    "experiments": 3,
    "report": 4,
    "cli": 5, "__main__": 5,
}
LAYER_NAMES = {0: "base", 1: "cuda/", 2: "the product", 3: "experiments/", 4: "report/", 5: "the command line"}


@dataclasses.dataclass(frozen=True)
class Import:
    importer: str   # dotted module name, e.g. fullpipe.cuda.compiler
    imported: str   # dotted module name inside fullpipe
    file: str       # path relative to src/
    line: int

    def arrow(self) -> str:
        return f"{self.file}:{self.line}: {self.importer} -> {self.imported}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py")) if "__pycache__" not in p.parts}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports() -> list[Import]:
    """Every import of a fullpipe module by a fullpipe module, as the name of the module
    that really gets loaded (`from .x import y` is fullpipe.x.y when y is a module)."""
    known = modules()
    found = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        rel = path.relative_to(SRC_DIR).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in known else base)
            for t in targets:
                if t == "fullpipe" or t.startswith("fullpipe."):
                    # `import fullpipe.a.b` loads fullpipe.a.b; a name that is no module
                    # of ours is cut back to the nearest module that is
                    while t not in known and "." in t:
                        t = t.rsplit(".", 1)[0]
                    if t != name:
                        found.append(Import(name, t, rel, node.lineno))
    return found


def layer_of(module: str) -> int:
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else "__init__"
    assert first in LAYERS, f"{module}: no layer for fullpipe.{first}; add it to LAYERS in {__file__}"
    return LAYERS[first]


def upward_imports() -> list[Import]:
    return [i for i in imports() if layer_of(i.imported) > layer_of(i.importer)]


def cycles(edges: list[Import]) -> list[list[Import]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    graph: dict[str, list[Import]] = {}
    for e in edges:
        graph.setdefault(e.importer, []).append(e)
        graph.setdefault(e.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in graph[v]:
            w = e.imported
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)

    found = []
    for comp in components:
        # the shortest way back to the component's first module, by breadth-first search
        start = min(comp)
        prev: dict[str, Import] = {}
        frontier = [start]
        while frontier and start not in prev:
            nxt = []
            for v in frontier:
                for e in graph[v]:
                    if e.imported in comp and e.imported not in prev:
                        prev[e.imported] = e
                        nxt.append(e.imported)
            frontier = nxt
        path, v = [], start
        while True:
            e = prev[v]
            path.append(e)
            v = e.importer
            if v == start:
                break
        found.append(path[::-1])
    return found


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    # A check that the reader works at all: the CLI imports its commands' modules inside
    # the command functions, relative to the package.
    arrows = {(i.importer, i.imported) for i in imports()}
    assert ("fullpipe.cli", "fullpipe.cuda.compiler") in arrows
    assert ("fullpipe.cli", "fullpipe.experiments") in arrows
    assert len(modules()) > 30 and all(layer_of(m) is not None for m in modules())


def test_layers_point_down():
    bad = upward_imports()
    lines = [f"{i.arrow()}  ({LAYER_NAMES[layer_of(i.importer)]} may not import "
             f"{LAYER_NAMES[layer_of(i.imported)]})" for i in bad]
    assert not bad, "imports that point up a layer:\n" + "\n".join(lines)


def test_no_import_cycles():
    found = cycles(imports())
    text = "\n\n".join("cycle:\n" + "\n".join("  " + e.arrow() for e in c) for c in found)
    assert not found, text


def folder_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_cycles_between_folders():
    """Modules of two folders may import each other's without a module cycle, and still
    tie the folders together (pipeline/ -> trace/ -> pipeline/)."""
    between = {}
    for i in imports():
        a, b = folder_of(i.importer), folder_of(i.imported)
        if a != b:
            between.setdefault((a, b), i)
    found = cycles([Import(a, b, i.file, i.line) for (a, b), i in between.items()])
    text = "\n\n".join("folder cycle (one arrow each):\n" + "\n".join("  " + e.arrow() for e in c)
                        for c in found)
    assert not found, text


def test_cycle_finder_names_the_arrows():
    a = Import("fullpipe.x", "fullpipe.y", "fullpipe/x.py", 3)
    b = Import("fullpipe.y", "fullpipe.z", "fullpipe/y.py", 5)
    c = Import("fullpipe.z", "fullpipe.x", "fullpipe/z.py", 7)
    d = Import("fullpipe.z", "fullpipe.w", "fullpipe/z.py", 8)
    assert cycles([a, b, c, d]) == [[a, b, c]]
    assert cycles([a, b, d]) == []


def test_importing_fullpipe_loads_no_evidence_or_presentation():
    """`import fullpipe` is the library: experiments, report and the CLI load only when
    asked for (a fresh interpreter, so nothing this test session imported counts)."""
    code = ("import sys, fullpipe; "
            "print(' '.join(m for m in sys.modules if m.split('.')[:2] in "
            "(['fullpipe', 'experiments'], ['fullpipe', 'report'], ['fullpipe', 'cli'])))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(SRC_DIR)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], f"import fullpipe loaded {proc.stdout.split()}"
