"""The import contracts hold (issue 27 part 3; the floors and the list: docs/DECISIONS.md "Import
contracts"): ``lint-imports`` with the repository's ``.importlinter`` keeps every contract, a
seeded violation breaks one (so the run can fail), no module import circle exists (imports
under ``TYPE_CHECKING`` count), and the deliverer never reaches RocksDB."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rocks_timer", "legacy_levels", "cli", "bench", "spark")
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.fail(f"{LINT} is missing: the dev extra installs import-linter (make venv)")
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}, timeout=120)


def test_every_import_contract_is_kept():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " broken" in run.stdout and "0 broken" in run.stdout
    assert "BROKEN" not in run.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("rocks_timer/config.py", "import rocks_timer.broker", "Ground"),
    ("rocks_timer/timer/wheel/state.py", "import rocks_timer.timer.memory", "never import each other"),
    ("rocks_timer/proxy/convert.py", "import rocks_timer.message_store", "Pop and the fronts"),
    ("bench/common.py", "import spark.report", "bench never imports spark"),
    ("rocks_timer/timer/keys.py", "from rocks_timer.timer import tally", "No import circles"),
    ("rocks_timer/timer/rocksdb/claims.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from rocks_timer.timer.rocksdb.store import RocksTimerStore",
     "Nothing imports the RocksDB store module"),
])
def test_a_seeded_violation_breaks_its_contract(tmp_path, module, line, contract):
    """The same configuration on a copy of the code with one bad import added: the run fails
    and names the contract (a contract that cannot fail would pass here)."""
    copy = tmp_path / "tree"
    copy.mkdir()
    shutil.copy(ROOT / ".importlinter", copy / ".importlinter")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "results"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # seeded by the test\n")
    run = _lint(copy)
    assert run.returncode != 0, run.stdout[-3000:]
    broken = [row for row in run.stdout.splitlines() if "BROKEN" in row]
    assert broken, run.stdout[-3000:]
    assert contract in run.stdout.split("Broken contracts")[-1], run.stdout[-3000:]


def _graph(external: bool = False) -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=external)


def _cycles(graph: grimp.ImportGraph, skip: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m)
                       if (m, n) not in skip and n in graph.modules) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
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


def test_no_module_import_circle_type_checking_imports_included():
    graph = _graph()
    # grimp sees imports under `if TYPE_CHECKING:` (RepairReport is imported only there)
    details = graph.get_import_details(importer="rocks_timer.timer.rocksdb.store",
                                       imported="rocks_timer.timer.rocksdb.recovery")
    assert any("import RepairReport" in d["line_contents"] for d in details), details
    assert _cycles(graph, set()) == []


def test_the_cycle_finder_finds_every_circle_and_skips_only_what_it_is_told():
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"),  # a circle
                               ("p.d", "p.a"), ("p.e", "p.f"), ("p.f", "p.e")]:
        graph.add_import(importer=importer, imported=imported)
    assert sorted(_cycles(graph, set())) == [["p.a", "p.b", "p.c"], ["p.e", "p.f"]]
    assert _cycles(graph, {("p.c", "p.a"), ("p.f", "p.e")}) == []


def test_the_deliverer_and_the_protocol_never_reach_rocksdict():
    graph = _graph(external=True)
    # a C extension (rocks_timer._native.codec) is no Python file, so grimp takes it for an
    # external package named after its top-level package: drop those edges, they are not
    # imports of the package's __init__
    for importer in sorted(graph.modules):
        if "rocks_timer" in graph.find_modules_directly_imported_by(importer):
            lines = graph.get_import_details(importer=importer, imported="rocks_timer")
            if lines and all("rocks_timer._native" in d["line_contents"] for d in lines):
                graph.remove_import(importer=importer, imported="rocks_timer")
    for module in ("rocks_timer.timer.deliverer", "rocks_timer.timer.delivery",
                   "rocks_timer.timer.tally", "rocks_timer.timer.store",
                   "rocks_timer.message_store"):
        chain = graph.find_shortest_chain(importer=module, imported="rocksdict")
        assert chain is None, f"{module} reaches rocksdict: {' -> '.join(chain)}"
    # and the check is not blind: the engine does import it
    assert graph.find_shortest_chain(importer="rocks_timer.timer.rocksdb.store",
                                     imported="rocksdict") is not None
