"""Reading a scenario: YAML to a validated Scenario, the JSON Schema of the files, and one step
validated on its own (the pytest fault controller builds its steps one at a time)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from splitbrain.harness.scenario.document import ScenarioFile
from splitbrain.harness.scenario.model import (
    Scenario,
    StepParams,
)
from splitbrain.harness.scenario.steps import StepSpec
from splitbrain.harness.scenario.vocabulary import (
    ScenarioError,
)
from splitbrain.harness.validation import (
    error_path,
    problems_of,
)
from splitbrain.node import protocols

# ---- loading ----------------------------------------------------------------------------------


# libyaml's parser when PyYAML has it: the same documents for a seventh of the instructions of the
# pure-Python parser on a scenario file (part of every command's start-up).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file. A missing file raises FileNotFoundError; bad YAML or a
    bad value raises ScenarioError."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError:
        data = _load_yaml_slowly(path, text)
    return parse_scenario(data, base_dir=path.parent)


def _load_yaml_slowly(path: Path, text: str) -> Any:
    """The pure-Python parser, for a file libyaml refused: its messages and positions are the
    ones users get (libyaml's are vaguer and sometimes a line late)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError("", f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


def parse_scenario(data: Any, base_dir: str | os.PathLike[str] | None = None) -> Scenario:
    """Validate a scenario given as a dict (as loaded from YAML) and resolve it. Every problem of
    the file is reported at once, in one ScenarioError. `base_dir` is where relative paths in it
    (jgroups.stack) start: the scenario file's directory (default: the working directory)."""
    try:
        f = ScenarioFile.model_validate(data, context={"base_dir": Path(base_dir or ".")})
    except ValidationError as exc:
        problems = problems_of(exc)
        raise ScenarioError(*problems[0], problems=problems) from None
    return f.scenario()


def json_schema() -> dict:
    """The JSON Schema of scenario files (`splitbrain schema`)."""
    schema = ScenarioFile.model_json_schema()
    schema["title"] = "splitbrain scenario"
    # The protocols registered now (the registry may grow at run time).
    schema["properties"]["protocol"]["enum"] = [*protocols.names(), *protocols.external_names()]
    schema["properties"]["membership"]["enum"] = ["static", *protocols.membership_names()]
    return schema


def step_params(kind: str, body: Any, path: str, nodes: tuple[str, ...], at: float, raw_len: int) -> StepParams:
    """One step's body, validated as in a file, its problems named under `path` (the pytest fault
    controller builds its steps one at a time)."""
    try:
        spec = StepSpec.model_validate({"at": at, kind: body}, context={"nodes": tuple(nodes), "schedule_len": raw_len})
    except ValidationError as exc:
        problems = [(error_path((path, *e["loc"][1:])), e["msg"]) for e in exc.errors()]
        raise ScenarioError(*problems[0], problems=problems) from None
    return spec.params
