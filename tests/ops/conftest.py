"""Fixtures of the production-serving tests."""
from __future__ import annotations


from tests.api.conftest import api  # noqa: F401 - the same token-authenticated clients
