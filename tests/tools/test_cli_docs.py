"""Every ``rtimer`` command is documented: a docstring with an example, and a section in
docs/CLI.md between the ``cli`` markers (sqlite-utils' test_docs habit)."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from cli.main import cli

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
CLI_DOC = ROOT / "docs" / "CLI.md"


def all_commands(group: click.Group = cli, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append((prefix + name, command))
        if isinstance(command, click.Group):
            found.extend(all_commands(command, prefix + name + " "))
    return found


def cli_section() -> str:
    text = CLI_DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- cli:start -->(.*)<!-- cli:end -->", text, re.S)
    assert match, "docs/CLI.md has no <!-- cli:start --> ... <!-- cli:end --> section"
    return match.group(1)


def test_the_expected_commands_exist():
    names = {name for name, _ in all_commands()}
    assert names >= {"send", "scan", "cancel", "consume", "run", "stats", "compact", "demo",
                     "bench", "bench wa", "bench tune"}


@pytest.mark.parametrize("name,command", all_commands(), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_command_has_a_docstring_with_an_example(name, command):
    assert command.help and command.help.strip(), f"rtimer {name} has no docstring"
    assert "Example: rtimer" in command.help, f"rtimer {name}'s docstring has no example"


@pytest.mark.parametrize("name", [name for name, _ in all_commands()])
def test_command_is_in_the_cli_doc(name):
    section = cli_section()
    assert f"### `rtimer {name}`" in section, f"docs/CLI.md lacks `rtimer {name}`"
    if name not in ("bench",):  # the group itself has no output of its own
        body = section.split(f"### `rtimer {name}`", 1)[1].split("### ", 1)[0]
        assert "```" in body, f"docs/CLI.md's `rtimer {name}` has no example block"


def _documented_options() -> list[tuple[str, str]]:
    return [("", opt) for param in cli.params for opt in param.opts if opt.startswith("--")] + [
        (name, opt) for name, command in all_commands() for param in command.params
        for opt in param.opts if opt.startswith("--")]


@pytest.mark.parametrize("name,option", _documented_options(), ids=lambda v: v or "rtimer")
def test_every_option_is_in_the_cli_doc(name, option):
    """An option is named in its command's section of docs/CLI.md, or (global options, and the
    ``--json`` every listing command takes) in the part before the first command."""
    section = cli_section()
    shared = section.split("### ", 1)[0]
    own = section.split(f"### `rtimer {name}`", 1)[1].split("### ", 1)[0] if name else ""
    assert f"`{option}" in own or f"`{option}" in shared or f"{option} " in own, (
        f"docs/CLI.md does not name `rtimer {name} {option}`")


def test_cli_doc_documents_the_formats_and_the_running_broker():
    section = cli_section()
    for phrase in ("500ms", "7d", "1h30m", "ISO 8601", "UTC", "rtimer.sock", "0600",
                   "body_base64", "RTIMER_DATA_DIR"):
        assert phrase in section, phrase
