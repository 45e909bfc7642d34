"""The README a newcomer reads: short, its quick start is a virtual environment, an install and
the example compile, and the commands it shows exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from dpql.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```bash\n(.*?)\n```", README, re.S)


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(README.splitlines()) <= 200


def test_the_quick_start_makes_a_venv_and_compiles_the_example() -> None:
    first = BLOCKS[0]
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e")
    spec = re.search(r"dpql compile (\S+)", first).group(1)
    assert (ROOT / spec).is_file()


def test_every_dpql_command_shown_parses() -> None:
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    for block in BLOCKS:
        for line in block.splitlines():
            line = line.split("#")[0].strip()
            if not line.startswith("dpql "):
                continue
            argv = shlex.split(line)[1:]
            assert argv[0] in commands, line
            parser.parse_args(argv)  # exits (SystemExit) on an unknown option


def test_the_table_lists_every_command() -> None:
    parser = build_parser()
    for name in parser._subparsers._group_actions[0].choices:
        assert f"| `dpql {name}" in README, name
