"""One way to read settings: the typed readers every protocol config and the daemon config use,
and `Settings`, the base of a protocol's frozen settings dataclass (from_dict, updated, as_dict).

Every error names its key (SettingError, or the caller's subclass such as the daemon's
ConfigError), so a scenario's `config.<key>` or a config file's key is said without parsing a
message back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, Self

from .errors import SettingError


def boolean(key: str, value: object, error: type[SettingError] = SettingError) -> bool:
    if not isinstance(value, bool):
        raise error(key, f"expected true or false, got {value!r}")
    return value


def integer(key: str, value: object, lowest: int | None = None, error: type[SettingError] = SettingError) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(key, f"expected an integer, got {value!r}")
    if lowest is not None and value < lowest:
        raise error(key, f"must be >= {lowest}, got {value}")
    return value


def number(
    key: str, value: object, what: str = "a number", finite: bool = False, error: type[SettingError] = SettingError
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (finite and not math.isfinite(value)):
        raise error(key, f"expected {what}, got {value!r}")
    return float(value)


def optional_string(key: str, value: object, error: type[SettingError] = SettingError) -> str | None:
    if value is not None and not isinstance(value, str):
        raise error(key, f"expected a string, got {value!r}")
    return value


# Any: a setting is whatever type its field has; the default's type picks the reader.
def coerce(key: str, value: Any, default: Any) -> Any:
    """`value` read as the type of the setting's `default` (a bool, a name or None, an integer,
    or a number of seconds)."""
    if isinstance(default, bool):
        return boolean(key, value)
    if default is None or isinstance(default, str):
        return optional_string(key, value)
    if isinstance(default, int):
        return integer(key, value)
    if isinstance(default, float):
        return number(key, value, "a number of seconds")
    return value


class Settings:
    """Mixed into a protocol's frozen settings dataclass: `OWNER` names it in the error for an
    unknown key; each known key is read as its default's type (coerce), then the dataclass's
    own __post_init__ checks ranges and combinations."""

    __slots__ = ()
    OWNER: ClassVar[str]

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]  # a dataclass

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        """Build from a scenario's `config:` mapping; unknown keys and wrong types name the key."""
        known = cls.keys()
        defaults = cls()
        clean: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise SettingError(str(key), f"unknown {cls.OWNER} setting (known: {', '.join(sorted(known))})")
            clean[key] = coerce(key, value, getattr(defaults, key))
        return cls(**clean)

    def updated(self, values: dict[str, Any]) -> Self:
        """A copy with some settings changed (run-time reconfiguration), validated like from_dict."""
        return type(self).from_dict({**self.as_dict(), **values})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]  # a dataclass
