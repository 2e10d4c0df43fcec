"""No import cycle under vramopt/optimizer (issue 12 build item 3): the training and serving
reductions reduce a request to tables through one interface, and no two optimizer modules
import each other, directly or through others. Every import counts, those inside functions
too (a deferred import is how a cycle hides), read from the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "vramopt" / "optimizer"


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module name -> the optimizer modules it imports (anywhere in its source)."""
    modules = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    prefix = "vramopt.optimizer"
    graph: dict[str, set[str]] = {}
    for name in modules:
        imported: set[str] = set()
        for node in ast.walk(ast.parse((package / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == prefix:
                    imported.update(alias.name for alias in node.names)
                elif node.module.startswith(prefix + "."):
                    imported.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[2] for alias in node.names if alias.name.startswith(prefix + "."))
        graph[name] = (imported & modules) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected group of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_two_optimizer_modules_import_each_other():
    assert cycles(import_graph()) == []


def test_the_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_deferred_imports(tmp_path):
    (tmp_path / "first.py").write_text("from vramopt.optimizer.second import x\n")
    (tmp_path / "second.py").write_text("def f():\n    from vramopt.optimizer import first\n")
    graph = import_graph(tmp_path)
    assert graph == {"first": {"second"}, "second": {"first"}}
    assert cycles(graph) == [["first", "second"]]


def test_the_builders_go_through_the_reductions():
    """problem.build_problem dispatches through REDUCTIONS; the serving builder and the
    reductions module import neither problem.py nor each other's dispatch."""
    graph = import_graph()
    assert "reductions" in graph["problem"]
    assert "problem" not in graph["serving_problem"] and "problem" not in graph["reductions"]
    assert "serving_problem" not in graph["reductions"]
