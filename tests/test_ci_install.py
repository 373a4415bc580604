"""ci/install (uv, else pip) and ci/quickstart's background install of the pipeline's dependencies.

The scripts run in a scratch copy of the tree whose installers are stubs that log their arguments:
no network, no real venv. Each stub is a shell script; `log` holds one line per call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = """\
[project]
name = "stub"
version = "0"
[project.optional-dependencies]
pipeline = ["pyspark", "pandas<3"]
"""


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _tree(tmp_path: Path, *, uv_exit: int | None) -> tuple[Path, dict[str, str]]:
    """A copy of ci/install and ci/quickstart with a stub .venv (python: `-m ensurepip` and
    `-m pip` log, anything else runs the real interpreter) and, unless uv_exit is None, a stub uv
    on PATH."""
    tree = tmp_path / "tree"
    (tree / "ci").mkdir(parents=True)
    for script in ("install", "quickstart"):
        shutil.copy(ROOT / "ci" / script, tree / "ci" / script)
    (tree / "pyproject.toml").write_text(PYPROJECT)
    log = tmp_path / "log"
    # .venv starts without pip (as ci/setup makes it): `-m pip` fails until `-m ensurepip` ran,
    # which takes no options we do not pass (the real one rejects -q).
    pip_marker = tmp_path / "venv-has-pip"
    _stub(
        tree / ".venv" / "bin" / "python",
        f'if [ "$1 $2" = "-m ensurepip" ]; then [ $# = 2 ] || exit 2\n'
        f"  echo ensurepip >>{log}; touch {pip_marker}; exit 0\nfi\n"
        f'if [ "$1 $2" = "-m pip" ]; then [ -e {pip_marker} ] || exit 1; echo "pip ${{*:3}}" >>{log}; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n',
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # ci/install turns to apt where ensurepip fails: never for real in a test.
    _stub(bin_dir / "apt-get", f'echo "apt-get $*" >>{log}\nexit 1\n')
    if uv_exit is not None:
        _stub(bin_dir / "uv", f'echo "uv $*" >>{log}\nexit {uv_exit}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPLITBRAIN_", "UV_"))}
    # Only the stubs and the basic tools: no real uv from the machine's PATH.
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    return tree, env


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "log"
    return log.read_text().splitlines() if log.exists() else []


def test_install_uses_uv_when_it_works(tmp_path):
    """uv on PATH installs (with bytecode, into .venv) and pip is never called."""
    tree, env = _tree(tmp_path, uv_exit=0)
    subprocess.run(["bash", "ci/install", "-e", ".[fast]"], cwd=tree, env=env, check=True)
    assert _calls(tmp_path) == ["uv pip install -q --compile-bytecode --python .venv/bin/python -e .[fast]"]


def test_install_falls_back_to_pip_when_uv_fails(tmp_path):
    """A failing uv is reported and pip installs the same arguments."""
    tree, env = _tree(tmp_path, uv_exit=3)
    done = subprocess.run(["bash", "ci/install", "-e", ".[fast]"], cwd=tree, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "uv failed (exit 3); installing with pip instead" in done.stderr
    calls = _calls(tmp_path)
    assert calls[0].startswith("uv pip install")
    assert calls[1:] == ["ensurepip", "pip install -q --upgrade pip", "pip install -q -e .[fast]"]


def test_install_with_uv_switched_off_uses_pip_only(tmp_path):
    """SPLITBRAIN_SETUP_UV=0: uv is not even asked."""
    tree, env = _tree(tmp_path, uv_exit=0)
    env["SPLITBRAIN_SETUP_UV"] = "0"
    subprocess.run(["bash", "ci/install", "pyspark"], cwd=tree, env=env, check=True)
    assert not [c for c in _calls(tmp_path) if c.startswith("uv")]
    assert _calls(tmp_path)[-1] == "pip install -q pyspark"


def _quickstart_tree(tmp_path: Path, *, install_exit: int) -> tuple[Path, dict[str, str]]:
    """ci/quickstart with stub ci/setup, ci/install (logs, prints, exits install_exit) and a stub
    splitbrain whose `run` makes a run directory and passes and whose `analyze` logs."""
    tree, env = _tree(tmp_path, uv_exit=None)
    log = tmp_path / "log"
    _stub(tree / "ci" / "setup", f'echo "setup $SPLITBRAIN_EXTRAS" >>{log}\n')
    _stub(tree / "ci" / "install", f'echo "install $*" >>{log}\necho "no such index"\nexit {install_exit}\n')
    _stub(
        tree / ".venv" / "bin" / "splitbrain",
        f'echo "$1 jit=$SPLITBRAIN_SPARK_JIT" >>{log}\n'
        'if [ "$1" = run ]; then mkdir -p "$4/one-way-split-resync-42"; fi\n',
    )
    return tree, env


def test_quickstart_installs_the_pipeline_while_running_then_analyzes(tmp_path):
    """Core first, the pipeline's requirements (not the project) beside the run, then the stamp
    and the analysis with the C1-only driver JVM."""
    tree, env = _quickstart_tree(tmp_path, install_exit=0)
    subprocess.run(["bash", "ci/quickstart"], cwd=tree, env=env, check=True, capture_output=True)
    calls = _calls(tmp_path)
    assert calls[0] == "setup fast"
    assert "install pyspark pandas<3" in calls
    assert calls[-1] == "analyze jit=c1"
    assert (tree / ".venv" / ".splitbrain-installed-pipeline-fast").exists()


def test_quickstart_reports_a_failed_background_install(tmp_path):
    """The run still gives its verdict; then the install's failure, its log and a non-zero exit,
    and no analysis and no stamp."""
    tree, env = _quickstart_tree(tmp_path, install_exit=7)
    done = subprocess.run(["bash", "ci/quickstart"], cwd=tree, env=env, capture_output=True, text=True)
    assert done.returncode == 7
    assert "installing the Spark pipeline's dependencies failed (exit 7" in done.stderr
    assert "no such index" in done.stderr
    calls = _calls(tmp_path)
    assert "run jit=" in calls
    assert not [c for c in calls if c.startswith("analyze")]
    assert not (tree / ".venv" / ".splitbrain-installed-pipeline-fast").exists()


def test_quickstart_with_the_pipeline_stamped_installs_nothing_more(tmp_path):
    """A second quick start: the stamp is current, so no background install and no wait."""
    tree, env = _quickstart_tree(tmp_path, install_exit=7)
    (tree / ".venv" / ".splitbrain-installed-pipeline-fast").touch()
    done = subprocess.run(["bash", "ci/quickstart"], cwd=tree, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = _calls(tmp_path)
    assert not [c for c in calls if c.startswith("install")]
    assert calls[-1] == "analyze jit=c1"


def test_quickstart_passes_on_a_run_that_made_no_run_directory(tmp_path):
    """Bad input (exit 2, nothing written): the quick start exits 2 too, analyzes nothing and
    stops the background install."""
    tree, env = _quickstart_tree(tmp_path, install_exit=0)
    _stub(tree / ".venv" / "bin" / "splitbrain", "exit 2\n")
    done = subprocess.run(["bash", "ci/quickstart"], cwd=tree, env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert not (tree / ".venv" / ".splitbrain-installed-pipeline-fast").exists()
