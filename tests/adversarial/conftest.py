"""Adversarial regressions: attacks on the decision semantics (races, stale holders, recovery
truthfulness, supersession across users, tenant moves, masking, insiders, hostile inputs). Each
file is named by what it attacks; each test failed on a first version of the code it guards and
passes now."""
from tests.tools.support import install_tool, model  # noqa: F401
