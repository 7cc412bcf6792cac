"""Data flows one way: no module but ``pygraph/graph.py`` reads or writes a `Graph`'s private state.

The graph hands each lower layer what it acts on (lowering and serialization the IR, planning its
lifecycle and lowering, autotune and explain the planner through ``graph.planner``); a module that
reached ``graph._ir``, ``graph._planner``, ``graph._freeze()``... instead would act on the façade
behind its back. The private names are read from ``graph.py`` itself, so a new one is covered.

The IR's own objects (tensors, nodes, port maps, the context) hold a back-reference named ``_ir``
too; a class may use ``self.<name>`` for a name it declares itself (``__slots__``, an assignment to
``self.<name>``, a method), which is how they are told apart from a graph's.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGES = pathlib.Path(__file__).resolve().parents[2]
REPO = PACKAGES.parent
GRAPH_PY = PACKAGES / "pygraph-core" / "src" / "pygraph" / "graph.py"
# calls that name an attribute by a string: getattr(g, "_planner"), object.__setattr__(g, "_ir", ...)
_BY_NAME = {"getattr", "hasattr", "setattr", "delattr", "__setattr__", "__getattribute__", "__delattr__"}


def graph_private_names(source: str) -> set[str]:
    """The private attributes and methods of class ``Graph`` in ``source`` (graph.py)."""
    tree = ast.parse(source)
    graph = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Graph")
    return {name for name in _declared(graph) if name.startswith("_") and not name.startswith("__")}


def _declared(cls: ast.ClassDef) -> set[str]:
    """Names a class declares for its instances: methods, ``__slots__``, ``self.x = ...`` targets."""
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if _is_self(getattr(target, "value", None)) and isinstance(target, ast.Attribute):
                    names.add(target.attr)
                if isinstance(target, ast.Name) and target.id == "__slots__" and node.value is not None:
                    names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return names


def _is_self(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _string_args(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def reaches(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` touches one of ``private`` on an object other than a
    ``self`` whose class declares that name itself."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, own: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            own = _declared(node)
        if isinstance(node, ast.Attribute) and node.attr in private:
            if not (_is_self(node.value) and node.attr in own):
                found.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            target = node.args[0] if node.args else None
            by_name = name in _BY_NAME
            in_dict = (
                isinstance(func, ast.Attribute)
                and name in ("get", "pop", "setdefault")
                and getattr(func.value, "attr", None) == "__dict__"
            )
            if in_dict:
                target = func.value.value
            if (by_name or in_dict) and not _is_self(target):
                found.extend((node.lineno, ast.unparse(node)) for s in _string_args(node) if s in private)
        if isinstance(node, ast.Subscript) and getattr(node.value, "attr", None) == "__dict__":
            key = node.slice
            if isinstance(key, ast.Constant) and key.value in private and not _is_self(node.value.value):
                found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, own)

    visit(ast.parse(source), set())
    return found


def offenders(root: pathlib.Path) -> list[str]:
    """``path:line what`` for every module under ``root`` (packages/*/src and benchmarks) but
    graph.py that touches a Graph's private state."""
    graph_py = root / "packages" / "pygraph-core" / "src" / "pygraph" / "graph.py"
    private = graph_private_names(graph_py.read_text())
    paths = sorted({*root.glob("packages/*/src/**/*.py"), *root.glob("benchmarks/**/*.py")} - {graph_py})
    return [
        f"{path.relative_to(root)}:{line} {what}"
        for path in paths
        for line, what in reaches(path.read_text(), private)
    ]


def test_the_graphs_private_names_are_read_from_graph_py():
    private = graph_private_names(GRAPH_PY.read_text())
    assert {"_ir", "_planner", "_lifecycle", "_lower", "_freeze", "_advance", "_lowered"} <= private


def test_no_module_but_graph_py_touches_a_graphs_private_state():
    found = offenders(REPO)
    assert found == [], "modules reach into the Graph façade:\n" + "\n".join(found)


def test_the_scan_finds_each_way_of_reaching_in():
    source = """
class Planner:
    def prepare(self):
        self.graph._freeze()                    # a method
        ir = graph._ir                          # an attribute
        getattr(graph, "_planner", None)        # by name
        object.__setattr__(graph, "_planner", 1)
        graph.__dict__.get("_lowered")
        graph.__dict__["_bindings"]

class Tensor:
    __slots__ = ("_ir",)

    def owner(self):
        return self._ir.owner                   # its own back-reference: allowed

def builder(self):
    return self._ir                             # no class of its own declares _ir
"""
    private = {"_ir", "_planner", "_freeze", "_lowered", "_bindings"}
    lines = [line for line, _ in reaches(source, private)]
    assert lines == [4, 5, 6, 7, 8, 9, 18]
