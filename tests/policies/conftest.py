"""Fixtures of the policy bundle tests (see tests/tools/support.py)."""
from tests.tools.support import install_tool, model  # noqa: F401 - fixtures
