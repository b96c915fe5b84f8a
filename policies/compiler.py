"""Checking a bundle against the tool catalog and compiling it for evaluation (docs/policy.md).

`compile_bundle` refuses a bundle with every problem it finds (BundleInvalid), each naming the
policy (its @id) or the limit and the error, so a misspelt `context.arguments.amuont` is refused
when the bundle is applied, never discovered in production. What it returns is what
policies.engine evaluates: the enforced and the shadow policy sets, each with the baseline
`permit` (what the registry and the tenant's whitelist already allow), and the rules' annotations.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import cedarpy

from policies.catalog import CatalogEntry, cedar_schema
from policies.cedar_text import syntax_error, too_complex
from policies.documents import RULE_ID, BundleDocument, Limit
from policies.errors import BundleInvalid

ANNOTATIONS = {"id", "gate", "quorum", "reason", "mode", "description"}
GATES = {"confirm", "approval"}
MAX_POLICIES = 500
BASELINE_ID = "baseline"
_QUORUM = re.compile(r"[1-9]")
_BASELINE = {"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"},
             "conditions": [], "annotations": {"id": BASELINE_ID}}


@dataclass(frozen=True)
class Rule:
    """One Cedar policy of a bundle, by its annotations. effect: permit/forbid. gate: "" (forbid),
    confirm or approval. quorum: distinct approvers for approval. tools: the actions it names
    (empty: every tool)."""

    id: str
    effect: str
    gate: str = ""
    quorum: int = 1
    reason: str = ""
    shadow: bool = False
    tools: frozenset[str] = frozenset()
    text: str = ""


@dataclass
class Compiled:
    """A validated bundle, ready to evaluate. rules: by Cedar's internal policy id (policy0, ...).
    enforced / shadow: cedarpy.PolicySet, each with the baseline permit. limits: the limits.
    nodes: each rule's policy as Cedar's JSON form, by the same internal id (what a comparison of
    two versions reads)."""

    version: int
    rules: dict[str, Rule]
    enforced: Any
    shadow: Any
    limits: list[Limit] = field(default_factory=list)
    nodes: dict[str, Any] = field(default_factory=dict)

    @property
    def has_shadow_rules(self) -> bool:
        return any(rule.shadow for rule in self.rules.values())

    def limits_for(self, tool: str) -> list[Limit]:
        return [limit for limit in self.limits if limit.tool == tool]


def _actions(node: dict[str, Any]) -> frozenset[str]:
    scope = node.get("action", {})
    if scope.get("op") == "==":
        return frozenset([scope["entity"]["id"]])
    if scope.get("op") == "in":
        return frozenset(e["id"] for e in scope.get("entities", []) if isinstance(e, dict))
    return frozenset()


def _rule(policy_id: str, node: dict[str, Any], errors: list[dict[str, str]]) -> Rule | None:
    notes = node.get("annotations") or {}
    rule_id = notes.get("id") or ""
    where = f"policy {rule_id}" if rule_id else f"policy #{int(policy_id.removeprefix('policy')) + 1}"
    problems = []
    if not RULE_ID.fullmatch(rule_id):  # fullmatch: `$` alone would accept a trailing newline
        problems.append('needs @id("...") of letters, digits and - _ . : (at most 100)')
    unknown = sorted(set(notes) - ANNOTATIONS)
    if unknown:
        problems.append(f"unknown annotation(s) {', '.join('@' + u for u in unknown)}; allowed: "
                        f"{', '.join('@' + a for a in sorted(ANNOTATIONS))}")
    effect, gate, quorum_text = node["effect"], notes.get("gate", ""), notes.get("quorum", "")
    if effect == "permit" and gate not in GATES:
        problems.append('a permit sets a gate: @gate("confirm") or @gate("approval") (a rule only tightens)')
    if effect == "forbid" and (gate or quorum_text):
        problems.append("a forbid denies: @gate and @quorum do not apply to it")
    quorum = 1
    if quorum_text and effect == "permit":
        if gate != "approval" or not _QUORUM.fullmatch(quorum_text):  # ASCII only: "²".isdigit() is True
            problems.append('@quorum("N") goes with @gate("approval"), N from 1 to 9')
        else:
            quorum = int(quorum_text)
    if notes.get("mode", "enforce") not in ("enforce", "shadow"):
        problems.append('@mode is "enforce" or "shadow"')
    if len(notes.get("reason", "")) > 500:
        problems.append("@reason is at most 500 characters")
    errors.extend({"where": where, "message": p} for p in problems)
    if problems:
        return None
    return Rule(id=rule_id, effect=effect, gate=gate, quorum=quorum, reason=notes.get("reason", ""),
                shadow=notes.get("mode") == "shadow", tools=_actions(node))


def _limit_errors(index: int, limit: Limit, catalog: dict[str, CatalogEntry]) -> list[dict[str, str]]:
    where = f"limit {limit.id}"
    entry = catalog.get(limit.tool)
    if entry is None:
        return [{"where": where, "message": f"unknown tool {limit.tool!r}"}]
    arguments = entry.arguments()
    errors = []
    if limit.per not in ("user", "tenant"):
        typed = arguments.get(limit.per)
        if typed is None or typed[0][0] not in ("string", "long", "decimal", "bool"):
            errors.append({"where": f"{where}.per", "message": (
                f"{limit.per!r} is not `user`, `tenant` or a plain argument of {limit.tool} "
                f"({', '.join(sorted(a for a, (t, _) in arguments.items() if t[0] != 'record')) or 'none'})")})
    if limit.max_sum is not None:
        typed = arguments.get(limit.max_sum.argument)
        if typed is None or typed[0][0] not in ("decimal", "long"):
            errors.append({"where": f"{where}.max_sum.argument", "message": (
                f"{limit.max_sum.argument!r} is not a numeric argument of {limit.tool}")})
    return errors


def compile_bundle(document: BundleDocument, catalog: dict[str, CatalogEntry], *, version: int = 0) -> Compiled:
    """Validate `document` against the schema of `catalog` (tool name -> CatalogEntry) and compile it.

    Returns a Compiled. Raises BundleInvalid listing every problem: a Cedar syntax error, templates,
    a policy without @id or with an unknown or inconsistent annotation, duplicate ids, a policy that
    does not validate against the catalog's schema (unknown tool, unknown or mistyped argument),
    a limit naming an unknown tool or argument, more than MAX_POLICIES policies.
    """
    errors: list[dict[str, str]] = []
    text = document.cedar
    complex_ = too_complex(text)
    if complex_ is not None:
        raise BundleInvalid([complex_])
    try:
        parsed = json.loads(cedarpy.policies_to_json_str(text)) if text.strip() else {"staticPolicies": {}}
    except ValueError as exc:
        raise BundleInvalid([syntax_error(text, str(exc))]) from None
    except RecursionError:
        raise BundleInvalid([{"where": "cedar", "message": "nested too deeply"}]) from None
    if parsed.get("templates"):
        errors.append({"where": "cedar", "message": "templates (?principal, ?resource) are not supported"})
    static: dict[str, Any] = parsed.get("staticPolicies") or {}
    if len(static) > MAX_POLICIES:
        raise BundleInvalid([{"where": "cedar", "message": f"{len(static)} policies; at most {MAX_POLICIES}"}])
    rules: dict[str, Rule] = {}
    for policy_id, node in sorted(static.items(), key=lambda kv: int(kv[0].removeprefix("policy") or 0)):
        rule = _rule(policy_id, node, errors)
        if rule is not None:
            rules[policy_id] = rule
    seen: dict[str, int] = {}
    for rule in rules.values():
        seen[rule.id] = seen.get(rule.id, 0) + 1
    limit_ids = {limit.id for limit in document.limits}
    for rule_id, count in seen.items():
        if count > 1 or rule_id in limit_ids or rule_id == BASELINE_ID:
            errors.append({"where": f"policy {rule_id}", "message": "this id is used more than once (ids name one rule or limit)"})
    if static:
        result = cedarpy.validate_policies(text, cedar_schema(catalog))
        if not result.validation_passed:
            names = {pid: (rule.id if rule else pid) for pid, rule in
                     ((pid, rules.get(pid)) for pid in static)}
            unknown_action = {problem.policy_id for problem in result.errors
                              if "unrecognized action" in problem.error}
            for problem in result.errors:
                name = names.get(problem.policy_id, problem.policy_id)
                message = problem.error.replace(f"for policy `{problem.policy_id}`, ", "")
                if problem.policy_id in unknown_action and "unable to find an applicable action" in message:
                    continue  # a consequence of the unknown action named just before
                if "unrecognized action" in message:
                    message += " (no such tool in the catalog)"
                errors.append({"where": f"policy {name}", "message": message[:500]})
    for index, limit in enumerate(document.limits):
        errors.extend(_limit_errors(index, limit, catalog))
    if errors:
        raise BundleInvalid(errors[:50])
    return _compiled(static, rules, document.limits, version)


def _compiled(static: dict[str, Any], rules: dict[str, Rule], limits: list[Limit], version: int) -> Compiled:
    def policy_set(shadow: bool) -> Any:
        chosen = {pid: node for pid, node in static.items() if rules[pid].shadow == shadow}
        chosen[BASELINE_ID] = _BASELINE
        return cedarpy.PolicySet.from_json_str(json.dumps({"staticPolicies": chosen, "templates": {},
                                                            "templateLinks": []}))

    try:
        enforced, shadow = policy_set(False), policy_set(True)
    except (ValueError, RecursionError):
        raise BundleInvalid([_too_nested(static, rules)]) from None
    return Compiled(version=version, rules=rules, enforced=enforced, shadow=shadow, limits=list(limits),
                    nodes=dict(static))


def _too_nested(static: dict[str, Any], rules: dict[str, Rule]) -> dict[str, str]:
    """Where a policy set could not be built from Cedar's JSON form: the first policy that cannot be
    on its own. Cedar reads that form with a nesting limit of 128, which a chain of some dozens of
    `&&`, `||`, `+` or `.a` (each one level deeper) exceeds."""
    for pid, node in static.items():
        try:
            cedarpy.PolicySet.from_json_str(json.dumps({"staticPolicies": {pid: node}, "templates": {},
                                                        "templateLinks": []}))
        except (ValueError, RecursionError):
            return {"where": f"policy {rules[pid].id}", "message": (
                "this policy nests too deeply for Cedar to store (a long chain of &&, ||, + or attribute "
                "accesses); split it into several rules or use a set: [\"A1\", \"A2\"].contains(...)")}
    return {"where": "cedar", "message": "the policies could not be compiled"}


def compile_stored(*, version: int, cedar: str, limits: list[dict[str, Any]]) -> Compiled:
    """Compile a bundle that was validated when it was applied (no catalog check: the catalog may
    have changed since; a rule naming a tool that is gone simply never matches). Raises
    BundleInvalid only if the stored text no longer parses (it was altered around the service)."""
    document = BundleDocument.model_validate({"version": 1, "cedar": cedar, "limits": limits})
    complex_ = too_complex(cedar)
    if complex_ is not None:
        raise BundleInvalid([complex_])
    try:
        parsed = json.loads(cedarpy.policies_to_json_str(cedar)) if cedar.strip() else {"staticPolicies": {}}
    except ValueError as exc:
        raise BundleInvalid([{"where": "cedar", "message": f"stored bundle does not parse: {exc}"[:500]}]) from None
    except RecursionError:
        raise BundleInvalid([{"where": "cedar", "message": "stored bundle nests too deeply"}]) from None
    static = parsed.get("staticPolicies") or {}
    errors: list[dict[str, str]] = []
    rules = {pid: _rule(pid, node, errors) for pid, node in static.items()}
    if errors:
        raise BundleInvalid(errors)
    return _compiled(static, rules, document.limits, version)  # type: ignore[arg-type]
