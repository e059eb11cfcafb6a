"""The one exception a bad configuration raises: its message names the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration value the model cannot use; the message names key and value."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")

