"""What ``pip install rocks-timer`` installs (docs/DECISIONS.md "Packaging").

A wheel is built from a copy of the checkout (offline, no build isolation) and read: it holds the
library and the ``rtimer`` command under the project's own names and nothing named plainly
``cli``, ``bench`` or ``spark``; it requires only what the library imports, with pyspark and the
dataframe and plotting stack behind the ``spark`` extra. Then the wheel is installed, not
editable, into a fresh venv whose only other packages are the dev venv's dependencies, and
``rtimer`` runs from there in a directory away from the checkout.
"""
from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
# pyspark and the dataframe/plotting stack: only the repository's Spark jobs and sweeps use them
SPARK_STACK = {"pyspark", "pandas", "pyarrow", "matplotlib"}
# a distribution's import name where it differs from its name
IMPORT_NAME = {"prometheus-client": "prometheus_client"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("src") / "rocks-timer"
    # a copy, so the build's build/ and egg-info never land in the checkout other runs use
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "__pycache__", "*.so", "*.egg-info", "build", "dist", "results",
        "node_modules", "target", ".pytest_cache", ".hypothesis", "*-data"))
    out = tmp_path_factory.mktemp("wheel")
    # CC=false: the optional C extension fails to compile and is left out (setup.py's
    # optional=True); what is tested here is names and metadata, not the native paths
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps",
                           "--no-build-isolation", "--no-index", "-w", str(out)],
                          env={**os.environ, "CC": "false"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    return built


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(name))


def _requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def test_the_wheel_holds_only_the_library_and_the_command_under_the_projects_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/", 1)[0] for n in z.namelist()}
        names = z.namelist()
    assert {t for t in tops if not t.endswith(".dist-info")} == {
        "rocks_timer", "rocks_timer_cli", "legacy_levels"}
    assert "rocks_timer_cli/main.py" in names
    assert "rocks_timer/metrics/static/dashboard.html" in names  # the dashboard ships inside
    with zipfile.ZipFile(wheel) as z:
        (entry,) = [n for n in z.namelist() if n.endswith("entry_points.txt")]
        assert "rtimer = rocks_timer_cli.main:main" in z.read(entry).decode()


def test_the_wheel_requires_only_what_the_library_imports(wheel):
    requires = _metadata(wheel).get_all("Requires-Dist")
    core = {_requirement_name(r) for r in requires if "extra ==" not in r}
    assert core and not core & SPARK_STACK, core
    spark = {_requirement_name(r) for r in requires if re.search(r'extra == "spark"', r)}
    assert spark == SPARK_STACK
    # every core requirement is imported by the installed code, so none is there for a tool
    with zipfile.ZipFile(wheel) as z:
        code = "\n".join(z.read(n).decode() for n in z.namelist() if n.endswith(".py"))
    for name in core:
        module = IMPORT_NAME.get(name, name.replace("-", "_"))
        assert re.search(rf"^\s*(import|from) {module}\b", code, re.M), (
            f"{name} is a core dependency but nothing installed imports {module}")
    for module in SPARK_STACK:
        assert not re.search(rf"^\s*(import|from) {module}\b", code, re.M), (
            f"installed code imports {module}, which only the `spark` extra provides")


def test_rtimer_runs_from_a_non_editable_install(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], check=True,
                             capture_output=True, text=True).stdout.strip()
    # the dependencies come from the dev venv's site-packages; a path named in a .pth is not a
    # site dir, so that venv's own .pth files (the editable install, the checkout) stay inert
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RTIMER_DATA_DIR")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=away, env=env, capture_output=True, text=True,
                              timeout=120)

    where = run(str(python), "-c", "import rocks_timer, rocks_timer_cli; "
                "print(rocks_timer.__file__); print(rocks_timer_cli.__file__)")
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(purelib) for line in where.stdout.split()), where.stdout
    for plain in ("cli", "bench", "spark"):
        missing = run(str(python), "-c", f"import {plain}")
        assert "ModuleNotFoundError" in missing.stderr, (plain, missing.stderr)

    rtimer = str(venv / "bin" / "rtimer")
    helped = run(rtimer, "--help")
    assert helped.returncode == 0 and "Usage: rtimer" in helped.stdout, helped.stderr
    sent = run(rtimer, "--data-dir", "data", "send", "orders", "hello from a wheel")
    assert sent.returncode == 0, sent.stderr
    got = run(rtimer, "--data-dir", "data", "consume", "orders", "--json")
    assert got.returncode == 0 and '"body": "hello from a wheel"' in got.stdout, got.stderr
    # the benchmark tools are not installed: the command says where they run instead
    bench = run(rtimer, "bench", "wa", "--help")
    assert bench.returncode == 1 and "make venv" in bench.stderr, bench.stderr


@pytest.mark.parametrize("command,module", [("wa", "spark.wa_compare"),
                                            ("tune", "spark.tune_compaction")])
def test_a_command_that_needs_the_spark_extra_names_it_when_it_is_missing(monkeypatch, command,
                                                                          module):
    """Without pyspark (an install without the `spark` extra) `rtimer bench` stops before the
    job starts and names the extra; `--help` still works."""
    import types

    from click.testing import CliRunner

    from cli.main import cli

    ran = []
    job = types.ModuleType(module)
    job.main = lambda argv=None: ran.append(argv) or 0
    monkeypatch.setitem(sys.modules, module, job)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark now raises ImportError
    result = CliRunner().invoke(cli, ["bench", command, "--messages", "10"])
    assert result.exit_code == 1 and not ran, result.output
    assert "`spark` extra" in result.output and "pyspark" in result.output, result.output
    assert "make venv" in result.output
    helped = CliRunner().invoke(cli, ["bench", command, "--help"])
    assert helped.exit_code == 0 and ran == [["--help"]], helped.output
