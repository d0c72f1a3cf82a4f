"""The documents hold together: every relative link in README.md, docs/*.md and tests/README.md
reaches a file of the repository (and, with an anchor, a heading of it), and no document or
source file sends the reader to a document outside the repository (docs/ARCHITECTURE.md took
over what those said)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
DOCS = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
# documents that lived outside the repository, and the ways code and docs used to cite them
OUTSIDE = re.compile(r"\bDESIGN(\.md\b| ?§| \d)|REFERENCE[- ]|ROCKETMQ-SEMANTICS|/work/shared"
                     r"|RocketMQ §\d")
SKIP_DIRS = {".git", "build", "dist", "node_modules", "target", "results", "__pycache__"}
SOURCE_SUFFIXES = {".py", ".md", ".c", ".h", ".toml", ".java", ".js", ".cfg", ".ini"}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # a '#' in a code block is no heading
    found: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(doc):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        name, _, anchor = target.partition("#")
        dest = (doc.parent / name).resolve() if name else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_slugs_are_githubs():
    assert slug("8. The engines and their rooms") == "8-the-engines-and-their-rooms"
    assert slug("Durability modes (issue 13)") == "durability-modes-issue-13"
    assert slug("The real Apache RocketMQ 5.5.1 beside rtimer (issue 29)") == \
        "the-real-apache-rocketmq-551-beside-rtimer-issue-29"
    assert slug("The `vlog` layout") == "the-vlog-layout"


def _sources() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if any(p in SKIP_DIRS or p.startswith(".venv") or p.endswith(".egg-info")
               for p in parts):
            continue
        if path.is_file() and (path.suffix in SOURCE_SUFFIXES or path.name == "Makefile"):
            found.append(path)
    return found


def test_nothing_cites_a_document_outside_the_repository():
    here = Path(__file__).resolve()
    hits = []
    for path in _sources():
        if path == here:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                 .splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:90]}")
    assert not hits, "\n".join(hits)


def test_the_outside_pattern_catches_the_old_citations():
    for old in ("(DESIGN §6b)", "DESIGN 13)", "DESIGN.md", "REFERENCE §2(c)",
                "/work/shared/REFERENCE-real-rocketmq.md", "(RocketMQ §2.11)"):
        assert OUTSIDE.search(old), old
    for fine in ("ARCHITECTURE §4", "docs/DECISIONS.md", "design choice", "DESIGNED"):
        assert not OUTSIDE.search(fine), fine


def test_every_file_architecture_names_exists():
    """ARCHITECTURE.md tells a newcomer which file to change (a cancel's effect on the due
    counters, for one): a name there that no longer matches a file of the repository is a
    wrong answer, so a rename or a move fails here until the document follows it."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`([\w./-]+\.py)`", text))
    folders = {n for n in re.findall(r"`([\w./-]+/)`", text) if not n.startswith(".")}
    files = [p.relative_to(ROOT).as_posix() for p in _sources() if p.suffix == ".py"]
    dirs = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_dir()
            and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    assert len(names) > 50 and "rocks_timer/timer/rocksdb/duecount.py" in names
    missing = [n for n in sorted(names)
               if not any(f == n or f.endswith("/" + n) for f in files)]
    missing += [d for d in sorted(folders)
                if not any(x == d[:-1] or x.endswith("/" + d[:-1]) for x in dirs)]
    assert not missing, f"docs/ARCHITECTURE.md names files that do not exist: {missing}"


def test_every_file_a_document_or_comment_names_exists():
    """Files move (the test folders, the engine's parts); a sentence that sends the reader to a
    file ("tests/x/test_y.py holds the two equal", "reference: rocks_timer/x.py") must follow."""
    here = Path(__file__).resolve()
    missing = []
    for path in _sources():
        if path == here:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in sorted(set(re.findall(
                r"\b(?:tests|rocks_timer|legacy_levels|cli|bench|spark)/[\w/]+\.(?:py|c|h)\b",
                text))):
            if not (ROOT / name).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, "\n".join(missing)


def test_the_readmes_first_python_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """README's first send and consume, run as written (real broker, real clock: it waits 2.5 s
    for the message due in 2 s) in an empty directory."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A first send and consume, in Python", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "True", out  # the cancel of the message due in 30 minutes
    assert out[3].startswith("b'close order 42' ") and out[3].endswith(" ms late"), out
    late_ms = int(out[3].split()[3])
    assert late_ms >= 0, out  # never early
