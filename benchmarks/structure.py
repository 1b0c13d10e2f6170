"""Structure figures of src/sealtrace: import circles, imports that run up the layers, long files.

    python benchmarks/structure.py [SRC_DIR]

The layers are docs/architecture.md's "Dependency direction", lowest first; a module may import its
own package, its layer's other packages only where ``SAME_LAYER`` allows it, and lower layers. Every
import counts, lazy ones inside functions too: a lazy import hides a dependency, it does not remove it.
tests/test_layers.py holds the project to these figures.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Packages (or leaf modules) by layer. ``ops.numerics`` and ``ops.registry`` sit below the kernels.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "limits", "outputs", "digest", "arrayfiles", "signing", "protowire", "jsonschemas", "zoo",
     "strictjson", "fields", "hashpool"),
    ("ops.numerics", "ops.registry"),
    ("ops",),
    ("plan",),
    ("container", "binding", "inputs"),
    ("engines", "torchops"),
    ("backends",),
    ("session",),
    ("parity", "conformance"),
    ("audit", "torchbridge"),
    ("falsify", "ledger", "verdict", "provenance"),
    ("serve", "scale"),
    ("cli",),
    ("__main__", "sealtrace"),
)  # fmt: skip
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
LONG_FILE = 600  # lines


@dataclass
class Figures:
    modules: int = 0
    circles: list[list[str]] = field(default_factory=list)  # module import circles, any import
    package_circles: list[list[str]] = field(default_factory=list)
    upward: list[tuple[str, str]] = field(default_factory=list)  # (importer, imported) modules
    unplaced: list[str] = field(default_factory=list)  # packages with no layer
    long_files: list[tuple[int, str]] = field(default_factory=list)


def package_of(module: str) -> str:
    """The layer unit of ``sealtrace.a.b``: ``a``, except for ops' two lower parts."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "ops" and parts[2] in ("numerics", "registry"):
        return f"ops.{parts[2]}"
    return parts[1] if len(parts) > 1 else "sealtrace"


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, package: str, modules: dict[str, Path]) -> Iterator[str]:
    """The project modules an import statement names (the nearest module for a name inside one)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            up = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(up + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith("sealtrace"):
            yield name


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def measure(root: Path) -> Figures:
    modules = _modules(root)
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _imported(node, package, modules):
                    if target != module and not module.startswith(target + "."):
                        edges[module].add(target)
    figures = Figures(modules=len(modules))
    figures.circles = _circles(edges)
    packages: dict[str, set[str]] = defaultdict(set)
    for module, targets in edges.items():
        for target in targets:
            a, b = package_of(module), package_of(target)
            if a != b:
                packages[a].add(b)
                if RANK.get(a, -1) < RANK.get(b, -1):
                    figures.upward.append((module, target))
    figures.package_circles = _circles(packages)
    figures.unplaced = sorted({package_of(m) for m in modules} - set(RANK))
    lengths = ((len(path.read_text().splitlines()), str(path.relative_to(root.parent))) for path in modules.values())
    figures.long_files = sorted((n, p) for n, p in lengths if n > LONG_FILE)
    return figures


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "src" / "sealtrace"
    figures = measure(root)
    print(f"modules: {figures.modules}")
    print(f"module import circles: {len(figures.circles)}")
    for circle in figures.circles:
        print("   ", " <-> ".join(circle))
    print(f"package import circles: {len(figures.package_circles)}")
    for circle in figures.package_circles:
        print("   ", " <-> ".join(circle))
    print(f"imports running up the layers: {len(figures.upward)}")
    for importer, imported in sorted(figures.upward):
        print(f"    {importer} -> {imported}")
    if figures.unplaced:
        print(f"packages with no layer: {', '.join(figures.unplaced)}")
    print(f"files over {LONG_FILE} lines: {len(figures.long_files)}")
    for lines, path in figures.long_files:
        print(f"    {lines:5d} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
