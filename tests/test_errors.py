"""Every error class of the packages has one of the two roots the command line maps to an exit
code: BadInput (2) or RunFailed (1). Interrupts (KeyboardInterrupt and its kin) are no errors: they
exit 130 or 143."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from splitbrain.node.errors import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, RunFailed, exit_code

PACKAGES = ("node", "harness", "faults", "pipeline")


def _public_errors() -> list[type[Exception]]:
    found: dict[str, type[Exception]] = {}
    for package in PACKAGES:
        root = importlib.import_module(f"splitbrain.{package}")
        for info in pkgutil.walk_packages(root.__path__, prefix=f"splitbrain.{package}."):
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # an optional dependency (pyspark, netfilterqueue) is absent
                continue
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, Exception)
                    and obj.__module__ == module.__name__
                    and not name.startswith("_")
                ):
                    found[f"{obj.__module__}.{name}"] = obj
    return sorted(found.values(), key=lambda c: f"{c.__module__}.{c.__qualname__}")


ERRORS = _public_errors()


def test_the_packages_define_errors():
    assert len(ERRORS) >= 25, [e.__name__ for e in ERRORS]


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_has_a_root(cls):
    assert issubclass(cls, (BadInput, RunFailed)), f"{cls.__module__}.{cls.__qualname__} has neither root"


def test_exit_codes_by_root():
    from splitbrain.harness.backends import BackendError, BackendUnavailable
    from splitbrain.harness.scenario import ScenarioError
    from splitbrain.harness.sim import SimulationError

    assert exit_code(ScenarioError("x", "bad")) == EXIT_BAD_INPUT
    assert exit_code(BackendUnavailable("no engine")) == EXIT_BAD_INPUT  # a BackendError, but the machine's
    assert exit_code(BackendError("node gone")) == EXIT_FAILED
    assert exit_code(SimulationError("livelock")) == EXIT_FAILED
    assert exit_code(ValueError("a bug")) is None
