"""What a user reads carries no development diary: README, docs, scenario files and the comments
and docstrings of the code say what is, not which session, issue or commit made it so, and cite
only files that are in the repository."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

# The checkout: the nearest folder above with pyproject.toml (tests may move into subfolders).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
CODE_DIRS = ("node", "harness", "faults", "pipeline", "ci", "benchmarks", "tests")

# label -> pattern; matched case-insensitively against prose only (comments, docstrings, Markdown).
DIARY = {
    "a session number": r"\bsession \d+|\bsession's machine\b|\b(?:a later|the next|in one|previous) session\b",
    "an issue number": r"\bissues? #?\d+\b",
    "a commit hash": r"\b(?:main|commit|at|on) (?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",
    "'this machine'": r"\bthis machine\b",
    "a load average": r"\bload averages? (?:of )?\d|\b1-min(?:ute)? load \d|\bat (?:a )?load \d|\(load \d",
    "a file outside the repository": r"\b(?:DESIGN|STYLE|MACHINE-NOTES)\.md\b|\bseeds/",
    "a design seed outside the repository": r"\bseeds? 00\d\b|\bseeds 00\d-00\d\b|\bseed goal\b|\bseed #\d",
}
PATTERN = re.compile("|".join(f"(?P<p{i}>{p})" for i, p in enumerate(DIARY.values())), re.IGNORECASE)
LABELS = list(DIARY)


def diary_in(text: str) -> list[str]:
    """Each diary phrase in `text`, as 'label: phrase'."""
    text = " ".join(text.replace("#", " ").split())  # a phrase broken over comment lines counts too
    return [f"{LABELS[int(m.lastgroup[1:])]}: {m.group(0)!r}" for m in PATTERN.finditer(text)]


def python_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python module."""
    prose = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            prose.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    prose.append((body[0].lineno, value))
    return prose


def hash_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of the `#` comments of a shell script or YAML file."""
    return [(n, line[line.index("#") :]) for n, line in enumerate(source.splitlines(), 1) if "#" in line]


def prose_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted((ROOT / "scenarios").rglob("*.md")) + sorted((ROOT / "scenarios").rglob("*.yaml"))
    for top in CODE_DIRS:
        files += sorted(p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in (".py", "", ".yaml", ".sh"))
    return [f for f in files if f.exists() and "__pycache__" not in f.parts and f != Path(__file__).resolve()]


def findings(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return []
    if path.suffix == ".md":
        pieces = list(enumerate(text.splitlines(), 1))
    elif path.suffix == ".py" or text.startswith("#!/usr/bin/env python"):
        pieces = python_prose(text)
    else:
        pieces = hash_comments(text)
    rel = path.relative_to(ROOT)
    return [f"{rel}:{line}: {hit}" for line, piece in pieces for hit in diary_in(piece)]


def test_detector_catches_each_kind_of_diary():
    for phrase in (
        "measured in session 12",
        "fixed in issue 9",
        "as of main 24ce0c2",
        "on this machine",
        "at load 7-11",
        "see DESIGN.md",
        "the rule of seed 002",
        "seed goal #3",
    ):
        assert diary_in(phrase), phrase
    for phrase in ("seed 42 of the run", "a Spark session", "--seeds 20", "the 0x7fffffff mask", "issues show"):
        assert not diary_in(phrase), phrase


def test_python_prose_reads_comments_and_docstrings_only():
    source = '"""Module doc, issue 3."""\nx = "issue 4"  # comment: issue 5\n\ndef f():\n    """issue 6"""\n'
    texts = [t for _, t in python_prose(source)]
    assert any("issue 3" in t for t in texts) and any("issue 5" in t for t in texts)
    assert any("issue 6" in t for t in texts) and not any("issue 4" in t for t in texts)


@pytest.mark.parametrize("area", ["docs", "code"])
def test_no_development_diary(area):
    files = [f for f in prose_files() if (f.suffix == ".md") == (area == "docs")]
    assert len(files) > 10
    found = [hit for f in files for hit in findings(f)]
    assert not found, f"{len(found)} diary phrase(s):\n" + "\n".join(found[:80])
