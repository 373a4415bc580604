"""The docs site stays true to the code: generated reference pages are current, and the site builds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The checkout: the nearest folder above with pyproject.toml (tests may move into subfolders).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())


def _docs_gen():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "ci" / "docs_gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_pages_are_current():
    # In a fresh process: a test that registers a protocol or a command in this one (the toy
    # protocol, the registry tests) would otherwise show up in the generated pages.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "docs_gen.py"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}: run `python ci/docs_gen.py` and commit the pages"


def test_cli_reference_lists_every_subcommand_and_option():
    from splitbrain.harness.cli import build_parser

    gen = _docs_gen()
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for name, sub in gen.subcommands(build_parser()).items():
        assert f"## {name}\n" in page
        for action in sub._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert f"`{opt}`" in page, f"{name} {opt} missing from docs/reference/cli.md"


def test_settings_tables_say_what_each_setting_means():
    from splitbrain.node import protocols

    gen = _docs_gen()
    for name in (*protocols.names(), *protocols.membership_names()):
        rows = gen.settings_rows(protocols.get(name))
        assert rows, name
        unexplained = [key for key, _default, meaning in rows if not meaning]
        assert not unexplained, f"{name}: settings without a comment in their settings class: {unexplained}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs extra)")
def test_docs_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "reference" / "cli" / "index.html").exists()


def test_benchmark_results_name_their_machine_and_a_command_that_exists():
    import json
    import shlex

    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert files, "no benchmark results: docs/results.md would be empty"
    for path in files:
        doc = json.loads(path.read_text())
        machine = doc["machine"]
        assert machine["cpu"] and machine["cores"] >= 1 and "load_1m" in machine, path.name
        argv = shlex.split(doc["command"])
        script = ROOT / argv[1]
        assert argv[0] == ".venv/bin/python" and script.is_file(), f"{path.name}: {doc['command']}"
        record = shlex.split(doc["record"])
        assert "--json" in record and (ROOT / record[1]).is_file(), doc["record"]
        writer = (ROOT / record[1]).read_text()
        assert "add_json_option" in writer or "@recorded(" in writer, doc["record"]
        for table in doc["tables"]:
            assert table["rows"] and all(len(r) == len(table["headers"]) for r in table["rows"]), table["title"]


def test_every_environment_knob_is_documented():
    """Each SPLITBRAIN_* variable the scripts and the code read is named in the docs (the node's
    SPLITBRAIN_<KEY> settings are covered by the node page's rule, not one by one)."""
    import re

    read = set()
    sources = [*(ROOT / "ci").iterdir(), ROOT / "docker-compose.yml", ROOT / "docker-compose.local.yml"]
    for top in ("node", "harness", "faults", "pipeline"):
        sources += (ROOT / top).rglob("*.py")
    for path in sources:
        if path.is_file():
            text = path.read_text(errors="replace")
            # A whole name in quotes (environ.get("..."), ENV = "..."), or ${...} / $... in a script.
            read |= set(re.findall(r"""["'](SPLITBRAIN_[A-Z0-9_]*[A-Z0-9])["']""", text))
            read |= set(re.findall(r"\$\{?(SPLITBRAIN_[A-Z0-9_]*[A-Z0-9])", text))
    node_keys = {"SPLITBRAIN_CONFIG_"}  # prefix of the node's per-setting variables
    docs = "\n".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    missing = sorted(v for v in read - node_keys if f"`{v}" not in docs and f"{v}=" not in docs)
    assert {"SPLITBRAIN_PROTOCOLS", "SPLITBRAIN_SPARK_CDS", "SPLITBRAIN_EXTRAS"} <= read, sorted(read)
    assert not missing, f"environment variables the docs do not name: {missing}"


def test_every_admin_endpoint_is_documented():
    """Each route the node's admin API registers (node/runtime/admin.py) is in docs/node.md's table."""
    import re

    source = (ROOT / "node" / "runtime" / "admin.py").read_text()
    routes = set(re.findall(r'add_(get|post|delete)\("([^"]+)"', source))
    assert len(routes) >= 10
    documented = set()
    for methods, path in re.findall(
        r"`((?:GET|POST|DELETE)(?:/(?:GET|POST|DELETE))*) (/[^`\s]*)`", (ROOT / "docs" / "node.md").read_text()
    ):
        documented |= {(m.lower(), path) for m in methods.split("/")}
    missing = sorted(f"{m.upper()} {p}" for m, p in routes - documented)
    assert not missing, f"admin endpoints docs/node.md does not document: {missing}"


def test_readme_links_resolve():
    import re

    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(targets) > 10
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_benchmark_output_tables_become_results():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from benchresults import tables_of

    out = "# Bench\n\n## 1. Speed\n\nLoad 3.1.\n\n| what | s |\n| --- | ---: |\n| loop | 1.5 |\n| ceiling | 0.5 |\n"
    out += "\nGoal: loop <= 3 s (met).\n"
    (table,) = tables_of(out)
    assert table["title"] == "1. Speed" and table["note"] == "Load 3.1."
    assert table["headers"] == ["what", "s"] and table["rows"] == [["loop", "1.5"], ["ceiling", "0.5"]]
    assert table["goal"] == "loop <= 3 s (met)."
    assert tables_of("no table here\n| a |\n") == []
