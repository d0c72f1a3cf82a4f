"""One owner per piece of state (issue 27): no module of ``rocks_timer`` reads or writes
another object's private attributes, and the RocksDB engine's parts import each other without
a circle, the store module imported by its package alone, the value log a leaf.

The scan is of the source (AST), so it holds for code no test runs. A private attribute is a
name with one leading underscore (``x._y``); ``self._y`` and ``cls._y`` are the owner's own.
``ALLOWED`` lists the accesses that must stay, each with the reason.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rocks_timer"
ENGINE = ROOT / "timer" / "rocksdb"
PACKAGE = "rocks_timer.timer.rocksdb"
# (file relative to rocks_timer/, the accessed expression) -> why it must stay
ALLOWED: dict[tuple[str, str], str] = {}


def private_reaches(source: str) -> list[tuple[int, str]]:
    """(line, expression) of every ``x._y`` in ``source`` where x is not self or cls."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        found.append((node.lineno, f"{ast.unparse(owner)}.{name}"))
    return found


def test_the_scan_finds_a_reach_into_another_objects_state():
    source = ("class A:\n    def f(self, store):\n        self._own = 1\n"
              "        return store._lock, self.part._x, cls._y, m.__dict__\n")
    assert [expr for _, expr in private_reaches(source)] == ["store._lock", "self.part._x"]


def test_no_module_reaches_into_another_objects_private_state():
    reaches = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        for line, expr in private_reaches(path.read_text(encoding="utf-8")):
            if (relative, expr) not in ALLOWED:
                reaches.append(f"rocks_timer/{relative}:{line}: {expr}")
    assert reaches == [], "\n".join(reaches)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_imports() -> dict[str, set[str]]:
    """Module -> the engine modules it imports (TYPE_CHECKING imports included)."""
    paths = sorted(ENGINE.rglob("*.py"))
    known = {_module_name(path) for path in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        module = _module_name(path)
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:  # ``from package import module``: that module
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in known else node.module)
        graph[module] = {t for t in targets if t in known} - {module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_engine_modules_import_each_other_without_a_circle():
    graph = engine_imports()
    # a package imports its own modules (``__init__`` re-exports): those edges are not circles
    without_packages = {m: {t for t in targets if not t.startswith(m + ".")}
                        for m, targets in graph.items()}
    assert _cycle({m: {t for t in ts if t in without_packages} for m, ts in
                   without_packages.items()}) is None


def test_only_the_package_imports_the_store_module():
    importers = [m for m, targets in engine_imports().items()
                 if f"{PACKAGE}.store" in targets]
    assert importers == [PACKAGE]
    for path in ROOT.rglob("*.py"):  # nor anything else of rocks_timer
        if path.parent != ENGINE or path.name != "__init__.py":
            assert f"{PACKAGE}.store" not in path.read_text(encoding="utf-8"), path


def test_the_value_log_is_a_leaf():
    """The ``vlog`` package imports nothing of the engine but the index value codec and the
    iterator check (it knows no store; its GC goes through ``gc.IndexSide``)."""
    outside = {f"{PACKAGE}.index", f"{PACKAGE}.scan"}
    for module, targets in engine_imports().items():
        if module.startswith(f"{PACKAGE}.vlog"):
            assert {t for t in targets if not t.startswith(f"{PACKAGE}.vlog")} <= outside, module
