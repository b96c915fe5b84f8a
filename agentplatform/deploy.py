"""Deployment safety read from the environment (docs/operations.md, "Production").

`DEPLOY_ENV=production` selects the production settings: a SECRET_KEY from the environment is
required (the process refuses to start without one), HTTPS-only cookies, SSL redirect and HSTS
are on by default, ALLOWED_HOSTS must be given. Anything else is the embedded default (`make demo`,
`make serve`, the tests), which never uses a key from the repository either: it generates a random
key once per checkout and keeps it in a git-ignored file.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# The key this repository once shipped in settings.py: refused wherever it comes from.
REPOSITORY_KEYS = frozenset({"dev-only-insecure-secret-key-change-me-in-production-0123456789"})
MIN_KEY_LENGTH = 50  # Django's check --deploy (security.W009) asks for at least 50 characters


def _usable(key: str, source: str) -> str:
    if key in REPOSITORY_KEYS or key.startswith("django-insecure-"):
        raise ImproperlyConfigured(f"{source} is a key published in a repository; generate a new one")
    if len(key) < MIN_KEY_LENGTH or len(set(key)) < 5:
        raise ImproperlyConfigured(f"{source} must be at least {MIN_KEY_LENGTH} random characters")
    return key


def secret_key(*, production: bool, key_file: Path) -> str:
    """The SECRET_KEY to use.

    `SECRET_KEY` from the environment wins. Without it, production raises ImproperlyConfigured
    (refuse to start); the embedded default reads `key_file`, creating it first (mode 0600, an
    86-character `secrets.token_urlsafe(64)`) when it does not exist; two processes starting at once
    agree on the first file written (O_EXCL). Raises ImproperlyConfigured for a key from a repository
    or a short one.
    """
    from_env = os.environ.get("SECRET_KEY", "").strip()
    if from_env:
        return _usable(from_env, "SECRET_KEY")
    if production:
        raise ImproperlyConfigured(
            "DEPLOY_ENV=production needs SECRET_KEY in the environment (at least 50 random characters, e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(64))'); refusing to start without it")
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _usable(key_file.read_text().strip(), str(key_file))
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(64) + "\n")
    return _usable(key_file.read_text().strip(), str(key_file))


def require_hosts(hosts: list[str], *, production: bool) -> list[str]:
    """ALLOWED_HOSTS; in production it must be given and must not be `*` (ImproperlyConfigured)."""
    if production and (not hosts or "*" in hosts):
        raise ImproperlyConfigured("DEPLOY_ENV=production needs ALLOWED_HOSTS (comma-separated host names, no '*')")
    return hosts
