"""splitbrain's pytest plugin: a cluster, a fault controller and `eventually`, in a few lines.

    def test_one_way_split_heals(splitbrain_cluster, faults):
        cluster = splitbrain_cluster(nodes=3, config={"xmit_interval": 0.2, "conn_close_timeout": 1.0})
        cluster.send("A", "B", rate=100, duration=6)
        faults.partition("A", "B", one_way=True)
        cluster.sleep(2)
        faults.heal()
        cluster.wait_settled()
        cluster.assert_checks()

Registered as a pytest11 entry point (`splitbrain = splitbrain.harness.plugin`); elsewhere
`-p splitbrain.harness.plugin`.
This module is only the pytest wiring (options, markers, fixtures, report hooks): the cluster, the
fault controller, `eventually` and the checkers are harness.testlib, which works without pytest;
their names stay importable from here.

Options: `--splitbrain-backend sim|local|docker` (default local; sim: the simulator in virtual time,
harness.sim.driver), `--splitbrain-seed N` (the seed of every cluster that does not pass seed=;
default 0), `--splitbrain-injector
auto|inprocess|iptables|toxiproxy`, `--splitbrain-keep` (docker: leave containers and network for
inspection; `splitbrain clean` removes them), `--splitbrain-timeout-scale F` (multiplies every
`eventually` and settle bound: for slow machines), `--splitbrain-runs DIR` (where run directories
go; default: the test's tmp_path).

Markers: `@pytest.mark.splitbrain_backend("docker")` runs a test on that backend whatever the
option says; with several names (`splitbrain_backend("sim", "local", "docker")`) the test runs once
per backend: on sim in milliseconds of wall clock (sleep and every wait advance virtual time),
deterministic from its seed, on local and docker over a real network. A test that ends up on
docker also gets the `docker` marker (`-m "not docker"` deselects it). When a backend cannot run
here (no engine, no image and no way to build it) its tests are skipped with the reason.

Fixtures:

- `splitbrain_cluster(nodes=3, protocol=, transport=, config=, seed=, injector=, name=, start=,
  membership=, ip_multicast=)`: a started `SplitbrainCluster` (with `membership="static"`, the default, every node
  has the view of all; with `"gms"` the nodes discover each other and make their own views, and
  `cluster.wait_view(members, timeout)` waits until every running node holds one view of exactly
  those members); torn down when the test ends, whatever happened (unless --splitbrain-keep).
- `faults`: the `FaultController` of the last cluster the test made: partition(a, b, one_way=True),
  heal(), loss(link, p), delay(link, ms), duplicate, reorder, toxic(link, type, **attrs),
  drop(at=, from_=, type=, count=), kill(n), restart(n), pause(n), resume(n), view(at, members).
  The same vocabulary and the same injectors as scenario files (partitions and loss as iptables
  rules on docker over UDP, Toxiproxy over TCP, the node fault layer otherwise); every fault is
  written to the cluster's timeline and removed at heal or when the cluster goes.
- `eventually(check, timeout=, what=)`: poll (tenacity) until `check()` is truthy or stops raising
  AssertionError; a timeout fails with what was expected and what was last seen.
- `splitbrain_checks`: the event-log checkers (fifo, no_duplicates, no_loss, windows_synced) over
  a cluster or a list of events.
- `splitbrain_run(scenario, **kw)`: run a whole scenario file on the test's backend
  (harness.run.run_scenario); returns its RunOutcome.
- `splitbrain_explore(protocol, runs=N, config=, against=, strategy=, seed=, nodes=, jobs=,
  expect_clean=True)`: explore on the simulator for N runs (harness.explore, docs/explore.md);
  each distinct failure is shrunk and written under the test's run directory, and with
  expect_clean the test fails naming each file and its rerun line. Returns the explore Session.

The report header names the session's backend and seed. On failure, the report gets, for every
cluster and run of the test: its seed and the line that reproduces it (`pytest <test>
--splitbrain-seed N`; `splitbrain run <run dir>/scenario.yaml --seed N --backend X` for a scenario
run; all of them again at the end of the session), its run directory, the last state of every
window (GET /state of each node, or the last one seen for a node that is gone) and the fault
timeline (sections `splitbrain ...`, and user_properties `splitbrain_run_dir`).

pytest-xdist: every cluster has its own addresses (local: a random 127.X.Y.0/24; docker: a
random network in 198.18.0.0/15 and unique container names), run directories are per test, and
the node image is built once (ci/images holds a lock).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from splitbrain.harness.names import BACKENDS, INJECTORS

if TYPE_CHECKING:
    from splitbrain.harness.scenario import Scenario
    from splitbrain.harness.testlib import Checkers, SplitbrainCluster

# Names users import from here (they lived in this module before harness.testlib existed). They are
# loaded on first use, like everything else this plugin needs: as a pytest11 entry point it is
# imported into every pytest session, and one that never asks for a cluster pays for none of it.
_REEXPORTS = (
    "DEFAULT_TIMEOUT_S",
    "WINDOW_SECTION_LIMIT",
    "Checkers",
    "EventuallyTimeout",
    "FaultController",
    "SplitbrainCluster",
    "cluster_scenario",
    "eventually",
)

__all__ = list(_REEXPORTS)


def __getattr__(name: str) -> Any:
    if name in _REEXPORTS:
        from splitbrain.harness import testlib

        return getattr(testlib, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CLUSTERS_KEY = pytest.StashKey[list]()
RUNS_KEY = pytest.StashKey[list]()
REPRO_KEY = pytest.StashKey[list]()
_BACKEND_CACHE_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("splitbrain", "splitbrain clusters and faults")
    group.addoption(
        "--splitbrain-backend",
        choices=BACKENDS,
        default=None,
        help="backend of the splitbrain_cluster fixture: sim (virtual time), local (default) or docker",
    )
    group.addoption(
        "--splitbrain-seed",
        type=_seed,
        default=None,
        metavar="N",
        help="seed of every splitbrain_cluster that does not pass seed= (default 0); a failing "
        "test's report prints the line that reproduces it",
    )
    group.addoption(
        "--splitbrain-injector",
        choices=INJECTORS,
        default=None,
        help="which injector applies network faults (default auto: iptables/Toxiproxy on docker, in-process on local)",
    )
    group.addoption(
        "--splitbrain-keep",
        action="store_true",
        default=False,
        help="docker: keep the containers and network of every cluster (splitbrain clean removes them)",
    )
    group.addoption(
        "--splitbrain-timeout-scale",
        type=float,
        default=None,
        help="multiply every eventually/settle timeout (default 1, or SPLITBRAIN_TIMEOUT_SCALE)",
    )
    group.addoption(
        "--splitbrain-runs",
        default=None,
        metavar="DIR",
        help="parent directory of run directories (default: each test's tmp_path)",
    )
    parser.addini(
        "splitbrain_backend", "default backend of the splitbrain fixtures (sim, local or docker)", default="local"
    )


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise pytest.UsageError(f"--splitbrain-seed: expected a non-negative integer, got {text!r}")
    return value


def _session_seed(config) -> int:
    value = config.getoption("--splitbrain-seed", None)
    return 0 if value is None else value


def pytest_report_header(config) -> str:
    seed = _session_seed(config)
    return (
        f"splitbrain: backend {_default_backend(config)}, seed {seed} for every cluster that does not pass "
        f"seed= (reproduce with --splitbrain-seed {seed})"
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "splitbrain_backend(*names): run the test on these splitbrain backends "
        "(sim, local, docker); several names run it once per backend",
    )
    config.addinivalue_line("markers", "docker: needs a Docker engine (skipped with the reason when none is reachable)")
    config.stash.setdefault(_BACKEND_CACHE_KEY, {})


def _marker_backends(node) -> list[str]:
    marker = node.get_closest_marker("splitbrain_backend")
    if marker is None:
        return []
    names = list(marker.args)
    for name in names:
        if name not in BACKENDS:
            raise pytest.UsageError(f"{node.nodeid}: splitbrain_backend({name!r}): backends are {', '.join(BACKENDS)}")
    return names


def _default_backend(config) -> str:
    try:
        ini = config.getini("splitbrain_backend")
    except ValueError:  # the plugin came late (pytest_plugins in a test module): no ini option
        ini = None
    return config.getoption("--splitbrain-backend", None) or ini or "local"


def pytest_generate_tests(metafunc):
    if "splitbrain_backend_name" not in metafunc.fixturenames:
        return
    names = _marker_backends(metafunc.definition)
    if len(names) > 1:
        metafunc.parametrize("splitbrain_backend_name", names, indirect=True, ids=names)


_SPLITBRAIN_FIXTURES = {
    "splitbrain_cluster",
    "faults",
    "splitbrain_run",
    "splitbrain_backend",
    "splitbrain_backend_name",
}


def backend_of(item) -> str | None:
    """The backend a collected test runs on through the splitbrain fixtures (None: it uses none)."""
    if not _SPLITBRAIN_FIXTURES & set(getattr(item, "fixturenames", ())):
        return None
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "splitbrain_backend_name" in callspec.params:
        return callspec.params["splitbrain_backend_name"]
    names = _marker_backends(item)
    return names[0] if names else _default_backend(item.config)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if backend_of(item) == "docker" and item.get_closest_marker("docker") is None:
            item.add_marker(pytest.mark.docker)


def _timeout_scale(config) -> float:
    value = config.getoption("--splitbrain-timeout-scale", None)
    if value is None:
        value = float(os.environ.get("SPLITBRAIN_TIMEOUT_SCALE", "1") or 1)
    return max(0.1, value)


@pytest.fixture
def splitbrain_backend_name(request) -> str:
    """The backend of this test: the parameter (several marker names), the marker, or the option."""
    if hasattr(request, "param"):
        return request.param
    names = _marker_backends(request.node)
    return names[0] if names else _default_backend(request.config)


@pytest.fixture
def splitbrain_backend(request, splitbrain_backend_name):
    """The Backend object (one per session and name); skips when it cannot run here."""
    cache = request.config.stash.setdefault(_BACKEND_CACHE_KEY, {})
    name = splitbrain_backend_name
    if name not in cache:
        from splitbrain.harness.backends import BackendUnavailable, get_backend
        from splitbrain.harness.sim.driver import SimBackend

        try:
            backend = SimBackend() if name == "sim" else get_backend(name)
            ok, why = backend.check()
        except BackendUnavailable as exc:
            backend, ok, why = None, False, str(exc)
        ensure_image = getattr(backend, "ensure_image", None)  # docker builds its node image once
        if ok and ensure_image is not None:
            try:
                ensure_image()
            except BackendUnavailable as exc:
                ok, why = False, str(exc)
        cache[name] = (backend, ok, why)
    backend, ok, why = cache[name]
    if not ok:
        pytest.skip(f"splitbrain backend {name} unavailable here: {why}")
    return backend


def _run_parent(request) -> Path:
    base = request.config.getoption("--splitbrain-runs", None)
    if base:
        path = Path(base)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return request.getfixturevalue("tmp_path")


@pytest.fixture
def splitbrain_cluster(request, splitbrain_backend, splitbrain_backend_name):
    """A factory of started clusters on the test's backend, torn down when the test ends."""
    from splitbrain.harness.backends import BackendError, ClusterOptions
    from splitbrain.harness.rundir import make_run_dir, write_scenario
    from splitbrain.harness.testlib import SplitbrainCluster, cluster_scenario
    from splitbrain.node.protocols import DEFAULT_PROTOCOL

    made: list[SplitbrainCluster] = []
    request.node.stash[CLUSTERS_KEY] = made
    keep = request.config.getoption("--splitbrain-keep", False)
    scale = _timeout_scale(request.config)
    default_injector = request.config.getoption("--splitbrain-injector", None)

    def factory(
        nodes: int | Iterable[str] = 3,
        *,
        protocol: str | None = None,
        transport: str = "udp",
        config: dict | None = None,
        seed: int | None = None,
        injector: str | None = None,
        name: str | None = None,
        start: bool = True,
        start_timeout_s: float = 60.0,
        membership: str = "static",
        ip_multicast: bool = False,
        jgroups: dict | None = None,
        recovery_bound: float | None = None,
    ) -> SplitbrainCluster:
        if seed is None:
            seed = _session_seed(request.config)
        test_name = name or "".join(c if c.isalnum() or c in "_.-" else "-" for c in request.node.name)[:60]
        scenario = cluster_scenario(
            nodes,
            protocol=protocol or DEFAULT_PROTOCOL,
            transport=transport,
            config=config,
            seed=seed,
            name=test_name.strip("-.") or "pytest",
            injector=injector or "auto",
            membership=membership,
            ip_multicast=ip_multicast,
            jgroups=jgroups,
            recovery_bound=recovery_bound,
        )
        run_dir = make_run_dir(_run_parent(request), scenario.name, seed)
        write_scenario(run_dir, scenario)
        options = ClusterOptions(
            injector=injector or default_injector, keep=keep, start_timeout_s=start_timeout_s * scale
        )
        cluster = splitbrain_backend.create_cluster(scenario, run_dir, seed=seed, options=options)
        sc = SplitbrainCluster(cluster, scenario, timeout_scale=scale)
        made.append(sc)
        if start:
            sc.start()
        return sc

    try:
        yield factory
    finally:
        errors = []
        for sc in reversed(made):
            try:
                sc.teardown()
            except Exception as exc:  # tear every cluster down, report the first problem
                errors.append(f"{sc.label}: {type(exc).__name__}: {exc}")
        if errors:
            raise BackendError("teardown failed: " + "; ".join(errors))


@pytest.fixture
def faults(request, splitbrain_cluster):
    """The fault controller of the last cluster this test made (make one first)."""

    class _Latest:
        def __getattr__(self, attr):
            made = request.node.stash.get(CLUSTERS_KEY, [])
            if not made:
                raise RuntimeError("faults: make a cluster with splitbrain_cluster(...) first")
            return getattr(made[-1].faults, attr)

    return _Latest()


@pytest.fixture
def splitbrain_checks() -> Checkers:
    from splitbrain.harness.testlib import Checkers

    return Checkers()


@pytest.fixture(name="eventually")
def eventually_fixture(request):
    """`eventually(check, timeout=, interval=, what=, describe=)` with the session's timeout scale."""
    from splitbrain.harness.testlib import DEFAULT_TIMEOUT_S, eventually

    scale = _timeout_scale(request.config)

    def scaled(check, *, timeout: float = DEFAULT_TIMEOUT_S, **kwargs):
        return eventually(check, timeout=timeout * scale, **kwargs)

    return scaled


@pytest.fixture
def splitbrain_run(request, splitbrain_backend, splitbrain_backend_name):
    """Run a scenario (a path or a Scenario) on the test's backend; returns the RunOutcome."""
    from splitbrain.harness.backends import ClusterOptions
    from splitbrain.harness.run import run_scenario
    from splitbrain.harness.scenario import Scenario, load_scenario

    runs: list = []
    request.node.stash[RUNS_KEY] = runs
    keep = request.config.getoption("--splitbrain-keep", False)
    default_injector = request.config.getoption("--splitbrain-injector", None)

    def run(
        scenario: Scenario | str | os.PathLike,
        *,
        seed: int | None = None,
        injector: str | None = None,
        backend: str | None = None,
        **options,
    ):
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        name = backend or splitbrain_backend_name
        cluster_options = ClusterOptions(injector=injector or default_injector, keep=keep)
        record = {"scenario": sc.name, "backend": name, "run_dir": None, "seed": sc.seed if seed is None else seed}
        runs.append(record)
        backend_options = {}
        if name == "docker" and name == splitbrain_backend_name:
            backend_options["client"] = splitbrain_backend.client
        try:
            outcome = run_scenario(
                sc,
                seed=seed,
                backend=name,
                out=_run_parent(request),
                cluster_options=cluster_options if name != "sim" else None,
                backend_options=backend_options if name != "sim" else None,
                **options,
            )
        except BaseException as exc:
            for note in getattr(exc, "__notes__", ()):
                if note.startswith("run directory"):
                    record["run_dir"] = note.split(":", 1)[1].strip()
            raise
        record["run_dir"] = str(outcome.run_dir)
        record["outcome"] = outcome
        return outcome

    return run


@pytest.fixture
def splitbrain_explore(request):
    """Explore a protocol for N simulator runs (see the module docstring)."""

    def run(
        protocol: str,
        *,
        runs: int = 100,
        config: dict | None = None,
        against: dict | None = None,
        strategy: str = "guided",
        seed: int | None = None,
        nodes: int = 3,
        jobs: int = 1,
        expect_clean: bool = True,
    ):
        from splitbrain.harness.explore.engine import Target, explore, rerun_command
        from splitbrain.harness.explore.vocab import vocabulary
        from splitbrain.harness.shrink import dump_scenario

        settings = dict(config or {})
        target = Target(
            protocol=protocol, config=settings, vocab=vocabulary(protocol, settings, nodes), against=against
        )
        seed = _session_seed(request.config) if seed is None else seed
        session = explore(target, strategy=strategy, seed=seed, runs=runs, jobs=jobs)
        if session.findings:
            out = _run_parent(request) / "explore"
            out.mkdir(parents=True, exist_ok=True)
            for f in session.findings:
                path = out / f"{f.scenario['name']}.yaml"
                path.write_text(f"# {f.check}: {f.explanation[:300]}\n" + dump_scenario(f.scenario), encoding="utf-8")
                f.path = str(path)
        if expect_clean and session.findings:
            lines = [
                f"{f.check} [{f.signature}] ({f.steps_after} steps): {rerun_command(f.path or '')}"
                for f in session.findings
            ]
            pytest.fail(
                f"explore {protocol} ({strategy}, seed {seed}, {session.runs} runs) failed:\n" + "\n".join(lines)
            )
        return session

    return run


def _fixture_repro(item, seed: int, backend: str) -> str:
    """The command that runs this test again with this seed (and backend, unless a marker picks it)."""
    words = ["pytest", item.nodeid, "--splitbrain-seed", str(seed)]
    if item.get_closest_marker("splitbrain_backend") is None:
        words += ["--splitbrain-backend", backend]
    return shlex.join(words)


def _run_repro(run_dir: str, seed: int, backend: str) -> str:
    return shlex.join(
        ["splitbrain", "run", str(Path(run_dir) / "scenario.yaml"), "--seed", str(seed), "--backend", backend]
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.when == "teardown":
        return
    repros = item.config.stash.setdefault(REPRO_KEY, [])
    for sc in item.stash.get(CLUSTERS_KEY, []):
        repro = _fixture_repro(item, sc.seed, sc.backend)
        report.sections.append((f"splitbrain {sc.label}: seed {sc.seed}", f"reproduce with: {repro}"))
        repros.append(repro)
        for title, text in sc.report():
            report.sections.append((title, text))
        prop = ("splitbrain_run_dir", str(sc.run_dir))
        report.user_properties.append(prop)
        item.user_properties.append(prop)
    for record in item.stash.get(RUNS_KEY, []):
        run_dir = record.get("run_dir")
        title = f"splitbrain run {record['scenario']} on {record['backend']}"
        report.sections.append((f"{title}: run directory", str(run_dir)))
        if run_dir:
            repro = _run_repro(run_dir, record["seed"], record["backend"])
            report.sections.append((f"{title}: seed {record['seed']}", f"reproduce with: {repro}"))
            repros.append(repro)
            report.user_properties.append(("splitbrain_run_dir", str(run_dir)))
            item.user_properties.append(("splitbrain_run_dir", str(run_dir)))
            from splitbrain.harness.testlib import run_summary

            report.sections.append((f"{title}: verdict and timeline", run_summary(Path(run_dir))))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Every failing cluster's and run's reproduction line, together at the end (as hypothesis does)."""
    repros = config.stash.get(REPRO_KEY, [])
    if repros:
        terminalreporter.section("splitbrain: reproduce the failures")
        for line in dict.fromkeys(repros):
            terminalreporter.write_line(line)
