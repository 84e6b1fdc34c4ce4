"""The docs site builds, and every ``agentwarm ...`` command line the README and the docs show is
one the CLI accepts: a real subcommand, and only options that subcommand has."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentwarm.cli.reference import command, markdown

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SEPARATORS = {"&&", "||", "&", "|", ";", "(", ")"}


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    # The hook imports agentwarm.cli.reference: this checkout's, not an installed copy's.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = tmp_path / "site"
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--step-timeout" in cli and "--no-share-learning" in cli  # the generated reference
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "An agent workflow is a graph of steps" in index  # the README's intro, included


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 350


def test_the_cli_reference_has_every_option() -> None:
    text = markdown()
    for path, cmd in _commands(command, ["agentwarm"]):
        assert f"## {' '.join(path)}\n" in text
        for param in cmd.params:
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("-"):
                    assert opt in text, (path, opt)


def _commands(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = []
    for name, sub in getattr(cmd, "commands", {}).items():
        found.append(([*path, name], sub))
        found += _commands(sub, [*path, name])
    return found


def _bash_lines(page: Path) -> list[tuple[int, str]]:
    """The lines of the page's ```bash blocks, ``\\``-continued lines joined, with line numbers."""
    lines, out = page.read_text(encoding="utf-8").splitlines(), []
    in_bash, pending, start = False, "", 0
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_bash = not in_bash and line.strip() == "```bash"
            continue
        if not in_bash:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def _segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line: split on ``&&``, ``&``, ``|``, ``;``, comments off."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;()")
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in SEPARATORS or set(token) <= set("&|;()"):
            segments.append([])
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _agentwarm_calls(args: list[str]) -> list[str] | None:
    while args and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", args[0]):  # VAR=value agentwarm
        args = args[1:]
    return args[1:] if args and args[0] == "agentwarm" else None


def _documented_calls() -> list[Any]:
    calls = []
    for page in PAGES:
        for number, line in _bash_lines(page):
            for segment in _segments(line):
                args = _agentwarm_calls(segment)
                if args is not None:
                    where = f"{page.relative_to(ROOT)}:{number}"
                    calls.append(pytest.param(args, id=f"{where} agentwarm {' '.join(args)}"[:120]))
    return calls


CALLS = _documented_calls()


def test_the_docs_show_agentwarm_commands() -> None:
    # The README's main command, the gateway and warm-up pages' examples at least.
    assert len(CALLS) >= 20


@pytest.mark.parametrize("args", CALLS)
def test_documented_command_line_is_real(args: list[str]) -> None:
    cmd, path = command, ["agentwarm"]
    rest = list(args)
    while getattr(cmd, "commands", None):
        assert rest and rest[0] in cmd.commands, (
            f"{' '.join(path)} has no subcommand {rest[:1]} (it has {sorted(cmd.commands)})"
        )
        path.append(rest[0])
        cmd = cmd.commands[rest.pop(0)]
    known = {"--help"}
    for param in cmd.params:
        known.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("-"))
    for token in rest:
        if token == "--":
            break
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            assert name in known, f"{' '.join(path)} has no option {name} (it has {sorted(known)})"


def test_the_checker_catches_a_wrong_command() -> None:
    line = "agentwarm serve --model tiny & agentwarm gateway --upstream URL --bogus 1 | tee x"
    calls = [_agentwarm_calls(s) for s in _segments(line)]
    assert calls == [["serve", "--model", "tiny"], ["gateway", "--upstream", "URL", "--bogus", "1"],
                     None]  # fmt: skip
    with pytest.raises(AssertionError, match="no option --bogus"):
        test_documented_command_line_is_real(["gateway", "--bogus", "1"])
    with pytest.raises(AssertionError, match="no subcommand"):
        test_documented_command_line_is_real(["warmup", "mine"])
