"""The examples in README.md and docs/ work: every `splitbrain COMMAND --option` they mention exists,
every scenario they show loads and passes in the simulator, every node config loads, every pytest
example passes on the sim backend, every other Python block compiles, and every shell block marked
`<!-- example: run -->` runs and exits 0.

A block is marked by an HTML comment on the line before its fence (invisible on GitHub and in the
site): `<!-- example: run -->` runs a shell block, `<!-- example: skip -->` exempts a block that only
shows output or a fragment (its `splitbrain` commands are still checked against the parsers).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

# The checkout: the nearest folder above with pyproject.toml (tests may move into subfolders).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
VENV_BIN = Path(sys.executable).parent
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
MARK = re.compile(r"<!--\s*example:\s*(\w+)\s*-->\s*$")
# `splitbrain COMMAND ...` in a code block line or an inline code span (also .venv/bin/splitbrain).
# Only where a command starts: a line's start (after a `$ ` prompt), after `&&`, `;` or `|`, or an
# inline code span's start; the program may have a path (.venv/bin/splitbrain).
COMMAND = re.compile(r"(?:^|[;&|]\s*|\$ )[ \t]*(?:[\w./-]*/)?splitbrain[ \t]+([a-z][\w-]*)([^\n`|]*)", re.M)
INLINE = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    info: str
    body: str
    mark: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    # The generated reference pages come from the parsers and schemas themselves.
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "reference" not in p.relative_to(ROOT).parts]
    return [ROOT / "README.md", *pages]


def blocks() -> list[Block]:
    found = []
    for path in doc_files():
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            body = "\n".join(ln[len(m.group("indent")) :] for ln in m.group("body").splitlines())
            found.append(Block(path, line, m.group("info").lower(), body, mark.group(1) if mark else None))
    return found


BLOCKS = blocks()


def of(kind: str) -> list[Block]:
    return [b for b in BLOCKS if b.info == kind and b.mark != "skip"]


def _scenarios() -> list[Block]:
    return [b for b in of("yaml") if isinstance(d := yaml.safe_load(b.body), dict) and "nodes" in d and "name" in d]


def _node_configs() -> list[Block]:
    return [b for b in of("yaml") if isinstance(d := yaml.safe_load(b.body), dict) and "bind" in d]


def _pytest_examples() -> list[Block]:
    return [b for b in of("python") if re.search(r"^def test_", b.body, re.M)]


def _runnable_shell() -> list[Block]:
    return [b for b in BLOCKS if b.info in ("bash", "sh", "shell") and b.mark == "run"]


def mentions() -> list[tuple[str, str, str]]:
    """(where, command, rest of the line) of every `splitbrain COMMAND` in code, block or inline."""
    found = []
    for path in doc_files():
        text = path.read_text()
        code = [(m.start(), m.group("body")) for m in FENCE.finditer(text)]
        code += [(m.start(), m.group(1)) for m in INLINE.finditer(FENCE.sub("", text))]
        for start, snippet in code:
            for m in COMMAND.finditer(snippet):
                where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, start) + 1}"
                found.append((where, m.group(1), m.group(2)))
    return found


def test_the_collector_finds_the_examples():
    assert _scenarios() and _pytest_examples() and _runnable_shell() and len(mentions()) > 20


def test_every_documented_command_and_option_exists():
    from splitbrain.harness.cli import build_parser

    sys.path.insert(0, str(ROOT / "ci"))
    from docs_gen import subcommands

    subs = subcommands(build_parser())
    wrong = []
    for where, command, rest in mentions():
        if command not in subs:
            wrong.append(f"{where}: no command `splitbrain {command}`")
            continue
        options = {s for a in subs[command]._actions for s in a.option_strings}
        # Options of this command only: stop at a comment, a pipe or the next command of the line.
        rest = re.split(r"\s#|\s&&|\s;|\|", rest)[0]
        for token in re.findall(r"(?<![\w-])--[a-z][\w-]*", rest):
            if token not in options:
                wrong.append(f"{where}: `splitbrain {command}` has no option {token}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("block", _scenarios(), ids=lambda b: b.id)
def test_scenario_example_passes_in_the_simulator(block, tmp_path):
    path = tmp_path / "example.yaml"
    path.write_text(block.body)
    proc = subprocess.run(
        [str(VENV_BIN / "splitbrain"), "run", str(path), "--backend", "sim", "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{block.id}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("block", _node_configs(), ids=lambda b: b.id)
def test_node_config_example_loads(block, tmp_path):
    from splitbrain.node.runtime.config import load_config

    path = tmp_path / "node.yaml"
    path.write_text(block.body)
    config = load_config(path, env={})
    assert config.name == yaml.safe_load(block.body)["name"]


def test_every_python_block_is_a_pytest_example():
    """A Python block either runs (below) or is marked skip: nothing shown as code goes untried."""
    untried = [b.id for b in of("python") if b not in _pytest_examples()]
    assert not untried, f"Python blocks that are no pytest example: {untried} (make one, or mark it skip)"


def test_doctor_probes_are_documented():
    from splitbrain.harness.commands.doctor import doctor_report

    page = (ROOT / "docs" / "backends.md").read_text()
    missing = [name for name in ("python", *doctor_report()) if f"`{name}`" not in page]
    assert not missing, f"docs/backends.md does not name the doctor probes {missing}"


def test_pytest_examples_pass_on_the_sim_backend(tmp_path):
    """All pytest examples in one file (one interpreter start), each test renamed after its block,
    on the simulator only: a marker's other backends are deselected."""
    examples = _pytest_examples()
    assert examples
    source = ["import pytest", ""]
    for i, block in enumerate(examples):
        source += [f"# {block.id}", re.sub(r"^def test_", f"def test_block{i}_", block.body, flags=re.M), ""]
    test_file = tmp_path / "test_examples.py"
    test_file.write_text("\n".join(source))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    argv += ["--splitbrain-backend", "sim", "-k", "not local and not docker", str(test_file)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTEST_ADDOPTS": ""}
    )
    assert proc.returncode == 0, f"{[b.id for b in examples]}:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert f"{len(examples)} passed" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("block", _runnable_shell(), ids=lambda b: b.id)
def test_runnable_shell_example_exits_0(block, tmp_path):
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for line in block.body.splitlines():
        command = line.split(" #", 1)[0].strip()
        if not command:
            continue
        # Run directories go to the test's tmp_path, not the checkout.
        argv = [ROOT / a if a.startswith(".venv/") else a for a in shlex.split(command)]
        if "--out" not in argv and len(argv) > 1 and str(argv[0]).endswith("splitbrain") and argv[1] == "run":
            argv += ["--out", str(tmp_path / "runs")]
        proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        assert proc.returncode == 0, f"{block.id}: `{command}` exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
