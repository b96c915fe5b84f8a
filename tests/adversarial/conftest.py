"""Adversarial regressions of issue 8 (a tester attacking the decision semantics: races, stale holders,
recovery truthfulness, supersession across users, tenant moves, masking of the new fields). Each test
failed on the first version of the change and passes now."""
from tests.tools.support import install_tool, model  # noqa: F401
