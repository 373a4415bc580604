"""The docs site stays true to the code: generated reference pages are current, and the site builds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _docs_gen():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "ci" / "docs_gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_pages_are_current():
    stale = _docs_gen().stale_pages()
    assert not stale, f"stale generated pages {stale}: run `python ci/docs_gen.py` and commit them"


def test_cli_reference_lists_every_subcommand_and_option():
    from harness.cli import build_parser

    gen = _docs_gen()
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for name, sub in gen.subcommands(build_parser()).items():
        assert f"## {name}\n" in page
        for action in sub._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert f"`{opt}`" in page, f"{name} {opt} missing from docs/reference/cli.md"


def test_settings_tables_say_what_each_setting_means():
    from node import protocols

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
