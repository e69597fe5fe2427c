"""Imports point down: the package's import graph, read from the source (every import, also those inside functions
and those under ``if TYPE_CHECKING:``), has no circle, no module outside ``iotrace.cli`` imports the command line,
and no module imports a higher layer.

The layers are those of docs/contributing/architecture.md ("Layers"), lowest first. A module belongs to the layer
of the longest prefix listed; modules of one layer may import each other (without a circle).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iotrace.source_graph import PACKAGE, import_graph

LAYERS: tuple[tuple[str, ...], ...] = (
    ("iotrace", "iotrace.errors", "iotrace.interrupts", "iotrace.checkout", "iotrace.argtypes", "iotrace.nvtx_ranges",
     "iotrace.source_graph", "iotrace.plugin_manager"),
    ("iotrace.cards", "iotrace.ceilings", "iotrace.sm_limits", "iotrace.cu_limits", "iotrace.model_shapes",
     "iotrace.identities"),
    ("iotrace.occupancy", "iotrace.occupancy_amd", "iotrace.derivations"),
    ("iotrace.render",),
    ("iotrace.plugins",),
    ("iotrace.compiler",),
    ("iotrace.kernels",),
    ("iotrace.kernel_call", "iotrace.tuned", "iotrace.runner"),
    ("iotrace.trace",),
    ("iotrace.autotune",),
    ("iotrace.model",),
    ("iotrace.engines",),
    ("iotrace.recipes",),
    ("iotrace.notes", "iotrace.selfcheck", "iotrace.tour"),
    ("iotrace.pytest_plugin",),
    ("iotrace.cli", "iotrace.__main__"),
)


def layer_of(module: str) -> int:
    best, found = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    assert found is not None, (f"{module} is in no layer: add it to LAYERS (and to the Layers table of "
                               "docs/contributing/architecture.md)")
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
                  for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def test_the_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    assert "iotrace.runner" in graph["iotrace.cli.kernels"]  # an import inside a function counts
    assert "iotrace.errors" in graph["iotrace.occupancy"]
    assert len(graph) > 100


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_only_the_command_line_imports_the_command_line() -> None:
    graph = import_graph()
    offenders = sorted(a for a, targets in graph.items()
                       if not (a == "iotrace.__main__" or a.startswith("iotrace.cli"))
                       and any(t == "iotrace.cli" or t.startswith("iotrace.cli.") for t in targets))
    assert offenders == []


def test_imports_point_down() -> None:
    assert upward(import_graph()) == []


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


@pytest.mark.parametrize(("source", "fault"), [
    ("from iotrace.autotune.tuner import tune\n", "iotrace.occupancy (layer 2) imports iotrace.autotune.tuner"),
    ("def f():\n    from iotrace.cli import main\n", "iotrace.occupancy (layer 2) imports iotrace.cli"),
])
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_deliberate_upward_import_is_caught(tmp_path: Path, source: str, fault: str) -> None:
    """The checks above can fail: a copy of the package with one upward import added fails them."""
    import shutil

    copy = tmp_path / "iotrace"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "occupancy.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n" + source, encoding="utf-8")
    graph = import_graph(copy)
    assert any(line.startswith(fault) for line in upward(graph))
    assert circles(graph)  # occupancy is imported from above, so the upward import closes a circle


def test_the_package_and_the_trace_reader_import_nothing_heavy() -> None:
    """``import iotrace``, ``iotrace.trace`` and building the whole command line load no torch, pandas or plotly (nor
    numpy, Triton or rich): `iotrace cards` and a plugin's import stay fast."""
    import subprocess
    import sys

    code = ("import sys, iotrace, iotrace.trace, iotrace.cli; iotrace.cli.build_parser(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pandas', 'plotly', 'numpy', 'triton', "
            "'rich'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
