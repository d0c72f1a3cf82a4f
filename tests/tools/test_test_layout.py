"""The suite stays navigable (issue 27 part 4): every test lives in a folder that tests/README.md
describes, every such folder is a package (so two folders may hold the same basename), and the
shared helpers in tests/support hold no tests."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# the RocketMQ 4.x client programs the remoting tests drive (not Python tests)
CLIENT_DIRS = {"fronts/java", "fronts/js", "fronts/python4"}


def python_folders() -> list[str]:
    found = set()
    for path in TESTS.rglob("*.py"):
        rel = path.parent.relative_to(TESTS).as_posix()
        if "__pycache__" in rel or any(rel == d or rel.startswith(d + "/") for d in CLIENT_DIRS):
            continue
        found.add(rel)
    return sorted(found)


def test_no_test_sits_at_the_top_of_tests():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_every_folder_is_described_in_the_readme():
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    described = set(re.findall(r"^\| `([a-z_/]+)/` \|", readme, re.M))
    folders = {f for f in python_folders() if f != "."}
    assert folders - described == set(), "add a line to tests/README.md for each new folder"
    assert described - folders == set(), "tests/README.md names a folder that is gone"


def test_every_folder_is_a_package():
    missing = [f for f in python_folders() if not (TESTS / f / "__init__.py").exists()]
    assert missing == []


def test_support_holds_helpers_only():
    assert sorted(p.name for p in (TESTS / "support").glob("test_*.py")) == []
