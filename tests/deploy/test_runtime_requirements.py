"""`make demo` installs requirements.txt only (the development set comes with `make test`): every
third-party module the product imports must come from a distribution that requirements.txt pins or
that one of those pins depends on. A module imported only because the development set happens to be
installed (httpx once was) breaks `make demo` on a fresh machine while every test passes."""
from __future__ import annotations

import ast
import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agentplatform", "approvals", "audit", "tools", "notifications", "mcp_sources")


def _pinned(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(canonicalize_name(Requirement(line).name))
    return names


def _closure(names: set[str]) -> set[str]:
    """The distributions `names` install, with their dependencies (no extras), as canonical names."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            continue
        for spec in requires:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def _imported_top_levels() -> dict[str, str]:
    """{top-level module: first file importing it} over the product's code (migrations included)."""
    found: dict[str, str] = {}
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_module_the_product_imports_is_installed_by_requirements_txt():
    runtime = _closure(_pinned(ROOT / "requirements.txt"))
    providers = md.packages_distributions()
    missing = []
    for module, where in sorted(_imported_top_levels().items()):
        if module in sys.stdlib_module_names or module in PRODUCT or (ROOT / module).exists():
            continue
        distributions = {canonicalize_name(d) for d in providers.get(module, [])}
        if not distributions & runtime:
            missing.append(f"{module} (imported by {where}; from {sorted(distributions) or 'nothing installed'})")
    assert not missing, "not installed by requirements.txt: " + "; ".join(missing)


def test_the_check_sees_a_module_only_the_development_set_installs():
    # httpx is pinned in requirements-dev.txt only: were the product to import it, the check above
    # must name it (this guards the check itself against always passing)
    runtime = _closure(_pinned(ROOT / "requirements.txt"))
    assert "httpx" in _pinned(ROOT / "requirements-dev.txt")
    assert not {canonicalize_name(d) for d in md.packages_distributions().get("httpx", [])} & runtime
