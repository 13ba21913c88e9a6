"""Every code block of the README and docs/ works as written: python blocks run, TOML blocks
load (tests/test_docs_toml.py) and every ``phaze ...`` command of a shell block parses against
the click command tree, each option existing on its command and each value it shows valid
for the option's type (a Choice's alternatives among its choices). The command lines are
parsed with click's ``make_context`` (a usage line with ``[...]`` and placeholders option by
option), never run. Output blocks (json, text, diagrams) are not code and are left alone."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from phaze.cli import cli

ROOT = Path(__file__).parents[1]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_SHELL = ("", "sh", "shell", "bash", "console")
# a block that runs a sweep starts worker processes: seconds of work on a shared machine
_SLOW_PYTHON = ("phaze.search(",)


def _blocks(lang: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, m in enumerate(_FENCE.finditer(doc.read_text("utf-8"))):
            if m[1] in lang:
                out.append((f"{doc.relative_to(ROOT)}#{i}", m[2]))
    return out


def _python_params() -> list:
    return [
        pytest.param(
            text,
            id=name,
            marks=[pytest.mark.slow] if any(s in text for s in _SLOW_PYTHON) else [],
        )
        for name, text in _blocks(("python",))
    ]


@pytest.mark.parametrize("text", _python_params())
def test_every_python_block_runs(text, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(text, "utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-3000:]


def _command_lines(text: str) -> list[str]:
    """The ``phaze`` command lines of a shell block: continuation lines (indented) joined,
    commands chained with ``&&`` split, everything before ``phaze`` (a venv path) and a
    redirection of its output (``> file``) dropped."""
    lines: list[str] = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip().removeprefix("$ ")
        if not line.strip():
            continue
        if raw[:1].isspace() and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.strip())
    out = []
    for line in lines:
        for part in line.split("&&"):
            words = re.sub(r"\s+>\s*\S+\s*$", "", part).split()  # output redirected to a file
            if words and re.fullmatch(r"(\S*/)?phaze", words[0]):
                out.append(" ".join(["phaze", *words[1:]]))
    return out


def _shell_lines() -> list[tuple[str, str]]:
    return [(name, line) for name, text in _blocks(_SHELL) for line in _command_lines(text)]


def _resolve(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """(the command ``words`` name, its path, the words after it)."""
    cmd: click.Command = cli
    path = ["phaze"]
    rest = words[1:]
    while isinstance(cmd, click.Group) and rest:
        sub = cmd.get_command(click.Context(cmd), rest[0])
        if sub is None:
            break
        cmd, path, rest = sub, [*path, rest[0]], rest[1:]
    return cmd, path, rest


def _options(cmd: click.Command) -> dict[str, click.Parameter]:
    return {
        o: p
        for p in cmd.params
        if isinstance(p, click.Option)
        for o in (*p.opts, *p.secondary_opts)
    }


def _is_placeholder(value: str) -> bool:
    """A usage line's stand-in for a value (``N``, ``FILE``, ``NAME|FILE.toml``, ``M,K,N``)."""
    return value[:1].isupper()


def _usage_problems(cmd: click.Command, path: list[str], rest: list[str]) -> list[str]:
    """What is wrong in a usage line's options: unknown names, invalid literal values."""
    options = _options(cmd)
    ctx = click.Context(cmd, info_name=" ".join(path))
    tokens = [t for t in (w.strip("[]") for w in rest) if t and t not in ("|", "...")]
    problems = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            continue
        names = token.split("|")
        unknown = [n for n in names if n not in options]
        if unknown:
            problems += [f"{' '.join(path)}: no option {n}" for n in unknown]
            continue
        param = options[names[0]]
        if param.is_flag or param.count or i >= len(tokens) or tokens[i].startswith("-"):
            continue
        value = tokens[i]
        i += 1
        if _is_placeholder(value):
            continue
        for alternative in value.split("|"):
            try:
                param.type.convert(alternative, param, ctx)
            except click.BadParameter as e:
                problems.append(f"{' '.join(path)} {names[0]} {alternative}: {e.message}")
    return problems


def test_the_docs_have_phaze_command_lines():
    lines = [line for _, line in _shell_lines()]
    assert any(line.startswith("phaze sweep") for line in lines)
    assert any("[" in line for line in lines) and any("[" not in line for line in lines)


@pytest.mark.parametrize(
    ("name", "line"), _shell_lines(), ids=[f"{n}:{line[:40]}" for n, line in _shell_lines()]
)
def test_every_phaze_command_line_parses(name, line):
    words = line.split()
    cmd, path, rest = _resolve(words)
    assert not isinstance(cmd, click.Group) or not rest, f"{name}: {line}: unknown command"
    if any(c in line for c in "[]|") or any(_is_placeholder(w) for w in rest):
        assert _usage_problems(cmd, path, rest) == [], f"{name}: {line}"
    else:
        cmd.make_context(" ".join(path), shlex.split(" ".join(rest)))


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("phaze sweep [--executor local|rai]", "--executor rai"),
        ("phaze sweep [--devcies N]", "no option --devcies"),
        ("phaze serve --workload W [--kv-admission on-demand|eager]", "--kv-admission eager"),
    ],
)
def test_the_usage_check_finds_a_wrong_option_or_value(line, problem):
    cmd, path, rest = _resolve(line.split())
    assert any(problem in p for p in _usage_problems(cmd, path, rest))


def test_a_concrete_line_with_a_bad_choice_is_refused():
    cmd, path, rest = _resolve("phaze sweep --executor rai".split())
    with pytest.raises(click.BadParameter):
        cmd.make_context(" ".join(path), rest)
