"""What an install puts into a user's environment: one import package, and a light pytest plugin.

The repository keeps node/, harness/, faults/ and pipeline/ at its top level; splitbrain/ links to
them, so that a checkout and an installed wheel both import them as `splitbrain.<package>` and
nothing else lands in site-packages to collide with a user's own `node` or `pipeline`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("node", "harness", "faults", "pipeline")


def _uv() -> str | None:
    local = Path(sys.executable).parent / "uv"
    return str(local) if local.exists() else shutil.which("uv")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of the sources (the work tree gets no build/)."""
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed (ci/setup installs it into .venv)")
    src = tmp_path_factory.mktemp("src")
    shutil.copy2(ROOT / "pyproject.toml", src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("splitbrain", *PACKAGES):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(out), str(src)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (found,) = out.glob("splitbrain-*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_installs_only_the_splitbrain_package(wheel, tmp_path):
    """Installed into a fresh venv, the wheel adds splitbrain/ and its dist-info to site-packages, nothing else."""
    uv = _uv()
    assert uv is not None
    members = zipfile.ZipFile(wheel).namelist()
    names = {name.split("/")[0] for name in members}
    assert names == {"splitbrain", wheel.name.split("-py3")[0] + ".dist-info"}, names
    # Data files the code reads travel with it: the report's page template.
    assert "splitbrain/pipeline/report/templates/report.html.j2" in members
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "-q", "--no-deps", "--python", str(python), str(wheel)], check=True, timeout=120
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    added = {p.name for p in site.iterdir()} - {"_virtualenv.py", "_virtualenv.pth", "__pycache__"}
    assert {n for n in added if not n.endswith(".dist-info")} == {"splitbrain"}, sorted(added)
    for package in PACKAGES:
        assert (site / "splitbrain" / package / "__init__.py").is_file(), package
    entry_points = next(site.glob("splitbrain-*.dist-info")) / "entry_points.txt"
    text = entry_points.read_text()
    assert "splitbrain = splitbrain.harness.cli:main" in text
    assert "splitbrain = splitbrain.harness.plugin" in text


def test_the_checkout_imports_the_same_names():
    """In a checkout, splitbrain.<package> is the top-level folder itself (one module, not a copy)."""
    import splitbrain.harness.cli
    import splitbrain.node.wire

    assert Path(splitbrain.node.wire.__file__).resolve() == ROOT / "node" / "wire.py"
    assert Path(splitbrain.harness.cli.__file__).resolve() == ROOT / "harness" / "cli.py"


def test_loading_the_pytest_plugin_imports_no_backend_scenario_or_simulator():
    """pytest loads the plugin in every session (pytest11): at load it imports only itself."""
    code = (
        "import sys; import splitbrain.harness.plugin as p\n"
        "print(sorted(m for m in sys.modules if m.startswith('splitbrain')))\n"
        "print(p.eventually.__module__, p.Checkers.__name__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    loaded, reexports = proc.stdout.splitlines()
    assert loaded == str(
        ["splitbrain", "splitbrain.harness", "splitbrain.harness.names", "splitbrain.harness.plugin"]
    ), loaded
    # The names users import from the plugin still resolve (lazily, through harness.testlib, which
    # has eventually from harness.poll).
    assert reexports == "splitbrain.harness.poll Checkers"


def test_no_module_imports_the_old_top_level_names():
    """Every import in the packages, tests and benchmarks names splitbrain.<package>, never a bare node/harness."""
    import ast

    offenders = []
    for folder in (*PACKAGES, "tests", "benchmarks", "ci"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for stmt in ast.walk(tree):
                if isinstance(stmt, ast.ImportFrom) and not stmt.level:
                    names = [stmt.module or ""]
                elif isinstance(stmt, ast.Import):
                    names = [alias.name for alias in stmt.names]
                else:
                    continue
                offenders += [
                    f"{path.relative_to(ROOT)}:{stmt.lineno} {n}" for n in names if n.split(".")[0] in PACKAGES
                ]
    assert not offenders, offenders
