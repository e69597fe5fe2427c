"""The package's import graph, read from its source: which iotrace modules each module imports (anywhere in it:
inside functions and under ``if TYPE_CHECKING:`` too), and the files a module's code can reach through them.

Two users: the architecture test (imports point down, no circles) and the published notes' measurement cache,
whose key is the content of every file a note's code can reach (``iotrace.notes.measured``).
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["PACKAGE", "import_graph", "module_files", "reachable"]

PACKAGE = Path(__file__).resolve().parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """module name -> its source file, for every module of the package at ``root``."""
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in its source."""
    files = module_files(root)
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from pkg import mod` imports the module pkg.mod where it exists, else a name of pkg.
                candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for target in candidates:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target.startswith(top) and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def reachable(modules: list[str], root: Path = PACKAGE) -> list[str]:
    """Every module of the package whose code ``modules`` can run: their imports, transitively, with each one's
    parent packages (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first). Sorted."""
    graph = import_graph(root)
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name not in graph:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += graph[name]
    return sorted(seen)
