"""Typed models of input files that name the path of every problem, in plain words.

A file is validated by pydantic models in one pass; each problem becomes a line error with its
location, so a file with several mistakes gets them all at once (`problems_of` turns them into
("workload[0].rate", "must be greater than 0") pairs). Validators that know more than pydantic
(names that must exist, cross-field rules) raise `problem(...)`, or `fail(..., *loc)` with a
location relative to the value they check, or collect several with `Problems`. Every model
rephrases pydantic's own errors in these words (`_say`), so a message reads the same whichever
way a problem was found, and `explain` gives a value its own words when it is out of bounds.
Fields are validated in the order they are declared: a validator can `remember` a value in the
validation context for the fields after it (a scenario's node names, for instance).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

_OURS = "splitbrain"
# Errors about the kind of a value, rephrased by `_say`; `explain` leaves them alone.
_TYPE_ERRORS = frozenset(
    {
        "float_type",
        "finite_number",
        "int_type",
        "int_from_float",
        "string_type",
        "list_type",
        "dict_type",
        "model_type",
        "bool_type",
        "missing",
    }
)


def error_path(loc: tuple) -> str:
    """("schedule", 2, "loss", "p") -> "schedule[2].loss.p"; a mapping's bad key is named by the key."""
    out = ""
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        is_key = i + 1 < len(loc) and loc[i + 1] == "[key]"
        out += f"[{part}]" if isinstance(part, int) and not is_key else (f".{part}" if out else str(part))
    return out


def problem(message: str) -> PydanticCustomError:
    """Raise it to report `message` at the value being validated."""
    return PydanticCustomError(_OURS, message)


def fail(message: str, *loc: str | int) -> NoReturn:
    """Report `message` at `loc`, relative to the value being validated."""
    raise ValidationError.from_exception_data(_OURS, [InitErrorDetails(type=problem(message), loc=loc, input=None)])


class Problems:
    """Several problems found by one validator, raised together."""

    def __init__(self) -> None:
        self.lines: list[InitErrorDetails] = []

    def add(self, message: str, *loc: str | int) -> None:
        self.lines.append(InitErrorDetails(type=problem(message), loc=loc, input=None))

    def collect(self, exc: ValidationError, *prefix: str | int) -> None:
        for e in exc.errors():
            self.add(e["msg"], *prefix, *e["loc"])

    def raise_any(self) -> None:
        if self.lines:
            raise ValidationError.from_exception_data(_OURS, self.lines)


def _say(error: Any, model: type[InputModel]) -> str:
    """A pydantic error in this module's words."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    got = "got null" if value is None else f"got {type_name(value)} {value!r}"
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return model.unknown_key_message()
    if error["loc"] and error["loc"][-1] == "[key]":
        return "keys must be strings"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a mapping, got {type_name(value)}"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"must be a number, {got}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return f"must be an integer, {got}"
    if kind in ("string_type", "string_too_short"):
        return f"must be a non-empty string, {got}"
    if kind == "list_type":
        return f"must be a list, {got}"
    if kind == "too_short":
        return "must not be empty"
    if kind == "greater_than_equal":
        return "must not be negative" if ctx["ge"] == 0 else f"must be at least {ctx['ge']}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    return f"{error['msg'][0].lower()}{error['msg'][1:]}, {got}"


def explain(template: str) -> WrapValidator:
    """Say `template` (formatted with the value) when the value itself has the right kind but is
    out of bounds, instead of pydantic's generic words."""

    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            if any(e["loc"] or e["type"] in _TYPE_ERRORS for e in exc.errors()):
                raise  # a wrong kind of value, or a problem of one of its items
            raise problem(template.format(value)) from None

    return WrapValidator(wrap)


def context(info: ValidationInfo) -> dict:
    return info.context if info.context is not None else {}


def remember(key: str) -> AfterValidator:
    """Keep a validated top-level value in the context, for the fields validated after it."""

    def keep(value: Any, info: ValidationInfo) -> Any:
        context(info)[key] = value
        return value

    return AfterValidator(keep)


class InputModel(BaseModel):
    """A mapping of an input file: unknown keys, wrong kinds and bad values name their path."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @classmethod
    def unknown_key_message(cls) -> str:
        keys = [f.alias or name for name, f in cls.model_fields.items()]
        return f"unknown key (expected one of: {', '.join(keys)})"

    @model_validator(mode="wrap")
    @classmethod
    def _in_our_words(cls, data: Any, handler: Any) -> Any:
        try:
            return handler(data)
        except ValidationError as exc:
            raise ValidationError.from_exception_data(
                _OURS,
                [
                    InitErrorDetails(
                        type=problem(e["msg"] if e["type"] == _OURS else _say(e, cls)),
                        loc=e["loc"],
                        input=e.get("input"),
                    )
                    for e in exc.errors()
                ],
            ) from None


def validate_part(adapter: TypeAdapter, raw: Any, info: ValidationInfo) -> Any:
    """Validate a part with its own adapter; its problems come out under the current path."""
    return adapter.validate_python(raw, context=info.context)


# ---- values that say what they must be -----------------------------------------------------

NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
Probability = Annotated[float, Field(ge=0, le=1), explain("must be between 0 and 1")]
PositiveInt = Annotated[int, Field(ge=1), explain("must be a positive integer, got {!r}")]
NonNegativeInt = Annotated[int, Field(ge=0), explain("must be a non-negative integer, got {!r}")]


def choice(options: tuple[str, ...]) -> Any:
    return Annotated[Literal[options], explain(f"must be one of {', '.join(options)}, got {{!r}}")]


def problems_of(exc: ValidationError) -> list[tuple[str, str]]:
    """Every problem of a validation, as (path, message), in the order found."""
    return [(error_path(e["loc"]), e["msg"]) for e in exc.errors()]


def type_name(raw: Any) -> str:
    return "null" if raw is None else type(raw).__name__
