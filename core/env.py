"""Small typed helpers that read settings from the environment and fail loudly.

Shaped after Healthchecks' settings helpers: a malformed value raises
ImproperlyConfigured at start-up instead of silently falling back.
"""
from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """Return the variable `name` as a string, or `default` when unset."""
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """Return the variable `name` as a bool (1/true/yes/on, 0/false/no/off).

    Raises ImproperlyConfigured for any other value.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean")


def env_int(name: str, default: int) -> int:
    """Return the variable `name` as an int. Raises ImproperlyConfigured if not an integer."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc


def env_float(name: str, default: float) -> float:
    """Return the variable `name` as a float. Raises ImproperlyConfigured if not a number."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    """Return the comma-separated variable `name` as a list of non-empty stripped strings."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]
