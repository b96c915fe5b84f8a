"""Fixtures of the governed tool call tests (see tests/tools/support.py)."""
from tests.tools.support import install_tool, model  # noqa: F401 - fixtures
