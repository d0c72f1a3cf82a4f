"""Nothing in the legacy levels, the CLI, bench or spark reaches into another module's private
state (issue 27 acceptance 1; ``test_private_state.py`` holds ``rocks_timer`` to the stricter
rule of no ``x._y`` at all): an attribute ``obj._name`` is touched only where ``_name`` is
defined, in the module of the class that owns it (a fault model and the class it patches). A
scan of the code's syntax, so a new ``broker.timer._db = ...`` in a benchmark fails here."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("legacy_levels", "cli", "bench", "spark")
# NamedTuple's public API carries a leading underscore (so as not to clash with field names)
PUBLIC_UNDERSCORED = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def _owned(tree: ast.Module) -> set[str]:
    """The private names this module defines: attributes it assigns on ``self``/``cls``,
    names bound in its class bodies and at its top level."""
    owned: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            owned.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            owned.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            owned.add(node.id)
        elif isinstance(node, ast.ClassDef):
            owned.add(node.name)
    for node in ast.walk(tree):  # __slots__ = ("_a", "_b")
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                for t in node.targets):
            owned.update(e.value for e in ast.walk(node.value)
                         if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return {name for name in owned if _private(name)}


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    owned, modules = _owned(tree), _imported(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        base = node.value
        if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in modules):
            continue  # its own state, or a module's private name (import rules cover modules)
        if node.attr in owned:
            continue  # defined in this module: a class of this module's own
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_tool_touches_private_state_defined_elsewhere():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += _reaches(path)
    assert found == []


def test_the_scan_sees_a_reach_into_another_modules_state(tmp_path):
    """Not blind: a module touching a private attribute it does not define is reported, one
    touching its own class's is not."""
    sample = tmp_path / "sample.py"
    sample.write_text("class Own:\n    def __init__(self):\n        self._mine = 1\n\n"
                      "def f(own, other):\n    own._mine += 1\n    return other._theirs\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _reaches(sample) == ["sample.py:7: other._theirs"]
    finally:
        ROOT = saved
