"""Where each technique is named outside its own modules: what adding it would touch today.

For every registered technique, the library modules (``vramopt/**.py``) other than its own
that name its plan field -- as a string (``"context_parallel"``), an attribute
(``plan.context_parallel``, ``columns.context_parallel``) or a keyword argument
(``context_parallel=2``) -- read from the syntax tree, so comments and docstrings do not
count. A technique's own modules are the ``constraints/`` module that declares it and the
``costs/`` modules that module imports from (its terms), plus the registry.

Run: ``python benchmarks/technique_footprint.py`` (``--technique context_parallel`` lists the
places for one technique; ``--shared`` also prints the layout files, the parallel layout and
the plan columns, which every key field's degree passes through by design; ``--root DIR``
measures another checkout, e.g. a worktree at an older commit).

It counts references to the field's name, so calls of a technique's term by function name
from a coupled place (``costs/memory.py`` calling ``state_bytes_per_parameter``) are not
counted, and short common names (``gpu``, ``slots``, ``optimizer``) are over-counted by
unrelated attributes of the same name: read the per-technique lists, not only the totals.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv:  # another checkout (a worktree at an older commit), measured the same way
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))

from vramopt.constraints import registry  # noqa: E402

PACKAGE = ROOT / "vramopt"
LAYOUT_FILES = ("vramopt/parallel_layout.py", "vramopt/costs/columns.py")
"""The degrees' one home and the cost model's column record: a key field's degree is known
there by design (issue 12 item 1), so they are reported apart."""


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
        # attribute docstrings: a string statement right after an assignment
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    ids.add(id(statement.value))
    return ids


def names_in(path: Path) -> set[str]:
    """Every identifier-like name the module uses as code: string constants, attributes, keywords."""
    tree = ast.parse(path.read_text())
    docstrings = _docstring_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.add(node.value)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
    return found


def own_modules(technique) -> set[str]:
    """The technique's constraints module and the vramopt.costs modules it imports, relative to the root."""
    for candidate in registry.MODULES:
        if technique in candidate.TECHNIQUES:
            source = Path(candidate.__file__)
            own = {str(source.relative_to(ROOT))}
            tree = ast.parse(source.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vramopt.costs."):
                    own.add(node.module.replace(".", "/") + ".py")
            return own
    return set()


def footprint() -> dict[str, dict[str, list[str]]]:
    files = sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)
    used = {str(path.relative_to(ROOT)): names_in(path) for path in files}
    result = {}
    for technique in registry.TECHNIQUES:
        own = own_modules(technique) | {"vramopt/constraints/registry.py"}
        elsewhere = [name for name, names in used.items() if technique.field in names and name not in own]
        result[technique.field] = {
            "own": sorted(own),
            "shared": [name for name in elsewhere if name not in LAYOUT_FILES],
            "layout": [name for name in elsewhere if name in LAYOUT_FILES],
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--technique", help="list the places for one technique")
    parser.add_argument("--shared", action="store_true", help="also list the layout files")
    parser.add_argument("--root", help="the checkout to measure (default: this one)")
    arguments = parser.parse_args()
    result = footprint()
    if arguments.technique:
        entry = result[arguments.technique]
        print(f"{arguments.technique}: own {', '.join(entry['own'])}")
        for name in entry["shared"]:
            print(f"  {name}")
        if arguments.shared:
            for name in entry["layout"]:
                print(f"  (layout) {name}")
        return
    print(f"{'technique':<24} {'own':>4} {'elsewhere':>9}  {'layout':>6}")
    for field, entry in result.items():
        print(f"{field:<24} {len(entry['own']):>4} {len(entry['shared']):>9}  {len(entry['layout']):>6}")


if __name__ == "__main__":
    main()
