"""Evaluating a compiled bundle's Cedar rules for one call (docs/policy.md, "How a decision is read").

Pure and in process (no database): `evaluate_rules(compiled, entry, arguments, username)`.

- The enforced set holds the bundle's enforced policies and the baseline `permit`. A satisfied
  `forbid` denies; its `@reason` is what the model and the requester read.
- Otherwise every satisfied `permit` names a gate; the strongest wins: approval (the highest
  @quorum among the satisfied approval rules) over confirm over none.
- Fail closed: an enforced policy whose evaluation errors (an arithmetic overflow, an argument
  Cedar cannot hold) denies the call with POLICY_ERROR, naming the rule: a forbid that errored
  must not let the call through.
- The shadow set is evaluated the same way, and what its rules would have done is returned
  (`RuleVerdict.shadow`), never enforced.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

import re

import cedarpy

from policies.catalog import CatalogEntry
from policies.compiler import BASELINE_ID, Compiled, Rule

LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1
DECIMAL_LIMIT = Decimal("922337203685477.5807")
FOUR_PLACES = Decimal("0.0001")
_ERRORED = re.compile(r"policy `([^`]+)`")


def _errored_ids(errors: list[Any]) -> list[str]:
    """Cedar's internal ids of the policies named in its evaluation errors (strings such as
    "error while evaluating policy `policy0`: integer overflow ...")."""
    ids = []
    for error in errors:
        match = _ERRORED.search(str(error))
        ids.append(match.group(1) if match else "")
    return ids


class NotRepresentable(ValueError):
    """An argument value Cedar cannot hold (a decimal beyond ±922337203685477.5807, a Long beyond
    64 bits): the call is denied with POLICY_ERROR rather than judged without it."""


@dataclass(frozen=True)
class Shadowed:
    """What one shadow rule or limit would have done: would = DENY | APPROVAL | CONFIRM."""

    rule_id: str
    would: str
    quorum: int | None = None


@dataclass(frozen=True)
class RuleVerdict:
    """The rules' verdict on one call. denied: a forbid (or an error) denies it; code is then
    POLICY_DENIED or POLICY_ERROR and reason what people read. gate: "" / confirm / approval, with
    quorum. rules: the @ids that decided (the forbids that denied, or the permits that set the
    winning gate). shadow: what shadow rules would have done."""

    denied: bool = False
    code: str = ""
    reason: str = ""
    gate: str = ""
    quorum: int = 1
    rules: tuple[str, ...] = ()
    shadow: tuple[Shadowed, ...] = ()


def _cedar_value(typed: tuple, value: Any) -> Any:
    kind = typed[0]
    if kind == "decimal":
        try:
            number = value if isinstance(value, Decimal) else Decimal(str(value))
            number = number.quantize(FOUR_PLACES, rounding=ROUND_HALF_EVEN)
        except (InvalidOperation, ValueError):
            raise NotRepresentable(f"{value!r} is not a decimal number") from None
        if not number.is_finite() or abs(number) > DECIMAL_LIMIT:
            raise NotRepresentable(f"{value} is beyond Cedar's decimal range")
        return {"__extn": {"fn": "decimal", "arg": f"{number:f}"}}
    if kind == "long":
        if isinstance(value, bool) or not isinstance(value, int) or not LONG_MIN <= value <= LONG_MAX:
            raise NotRepresentable(f"{value!r} is not a 64-bit integer")
        return value
    if kind == "set":
        return [_cedar_value(typed[1], item) for item in (value or [])]
    if kind == "record":
        return cedar_arguments(typed[1], value or {})
    return value


def cedar_arguments(types: dict[str, tuple], values: dict[str, Any]) -> dict[str, Any]:
    """`values` (argument name -> JSON value, as normalised) in Cedar's JSON form, for the
    arguments `types` names (CatalogEntry.arguments()); None and untyped arguments are left out.
    Raises NotRepresentable."""
    out = {}
    for name, (typed, _required) in types.items():
        value = values.get(name)
        if value is not None:
            out[name] = _cedar_value(typed, value)
    return out


def _request(entry: CatalogEntry, arguments: dict[str, Any], username: str, risk: str) -> dict[str, Any]:
    return {"principal": {"type": "User", "id": username or "-"},
            "action": {"type": "Action", "id": entry.name},
            "resource": {"type": "Tool", "id": entry.name},
            "context": {"arguments": arguments, "risk": risk}}


def _gate_of(rules: list[Rule]) -> tuple[str, int, tuple[str, ...]]:
    approvals = [r for r in rules if r.gate == "approval"]
    if approvals:
        quorum = max(r.quorum for r in approvals)
        return "approval", quorum, tuple(sorted(r.id for r in approvals if r.quorum == quorum))
    confirms = [r for r in rules if r.gate == "confirm"]
    if confirms:
        return "confirm", 1, tuple(sorted(r.id for r in confirms))
    return "", 1, ()


def _shadowed(compiled: Compiled, request: dict[str, Any]) -> tuple[Shadowed, ...]:
    result = cedarpy.is_authorized(request, _for_tool(compiled, "shadow", request["action"]["id"]), [])
    out = []
    for pid in result.diagnostics.reasons:
        rule = compiled.rules.get(pid)
        if rule is None:
            continue
        if rule.effect == "forbid":
            out.append(Shadowed(rule.id, "DENY"))
        else:
            out.append(Shadowed(rule.id, "APPROVAL" if rule.gate == "approval" else "CONFIRM",
                                rule.quorum if rule.gate == "approval" else None))
    for pid in _errored_ids(result.diagnostics.errors):  # a shadow rule that errors would deny
        rule = compiled.rules.get(pid)
        if rule is not None:
            out.append(Shadowed(rule.id, "DENY"))
    return tuple(sorted(set(out), key=lambda s: s.rule_id))


def _for_tool(compiled: Compiled, which: str, tool: str) -> Any:
    """The policy set `which` ("enforced" or "shadow") of `compiled` reduced to the policies that
    can apply to `tool`: those whose action scope names it, those without an action scope, and the
    baseline. Cedar spends time on every policy of a set, even one scoped to another action, so a
    call is judged against its tool's policies only (the same verdict: a policy scoped to another
    action is never satisfied). Built once per compiled bundle and tool; the policy ids are kept,
    so diagnostics still name `compiled.rules`."""
    return _reduced(compiled, which, tool)[0]


def _reduced(compiled: Compiled, which: str, tool: str) -> tuple[Any, int]:
    """(the reduced policy set, how many of the bundle's rules it holds besides the baseline)."""
    cache = compiled.__dict__.setdefault("_for_tool", {})
    key = (which, tool)
    reduced = cache.get(key)
    if reduced is None:
        full = getattr(compiled, which)
        tree = full.to_pst()
        kept = {pid: policy for pid, policy in tree.static_policies.items()
                if pid not in compiled.rules or not compiled.rules[pid].tools or tool in compiled.rules[pid].tools}
        policies = full if len(kept) == len(tree.static_policies) else cedarpy.PolicySet.from_pst(
            cedarpy.pst.PolicySet(templates={}, static_policies=kept, template_links=()))
        reduced = cache[key] = (policies, sum(1 for pid in kept if pid in compiled.rules))
    return reduced


def _any_shadow(compiled: Compiled) -> bool:
    """Compiled.has_shadow_rules, read once per compiled bundle (it walks every rule; a compiled
    bundle never changes)."""
    known = compiled.__dict__.get("_any_shadow")
    if known is None:
        known = compiled.__dict__["_any_shadow"] = compiled.has_shadow_rules
    return known


def evaluate_rules(compiled: Compiled, entry: CatalogEntry, arguments: dict[str, Any], *, username: str,
                   risk: str) -> RuleVerdict:
    """The rules' verdict on one call of `entry` with `arguments` (argument name -> normalised
    JSON value, with the tool's policy fills) by `username`, the tool's effective `risk` in force.
    Returns a RuleVerdict. Raises nothing: a value Cedar cannot hold or an erroring rule denies
    with POLICY_ERROR."""
    try:
        values = cedar_arguments(entry.arguments(), arguments)
    except NotRepresentable as exc:
        return RuleVerdict(denied=True, code="POLICY_ERROR", reason=f"the policy cannot judge this call: {exc}")
    request = _request(entry, values, username, risk)
    shadow = _shadowed(compiled, request) if _any_shadow(compiled) else ()
    policies, rules = _reduced(compiled, "enforced", entry.name)
    if not rules:  # no enforced rule can apply to this tool: only the baseline, which permits
        return RuleVerdict(shadow=shadow)
    result = cedarpy.is_authorized(request, policies, [])
    errored = [compiled.rules[pid] for pid in _errored_ids(result.diagnostics.errors) if pid in compiled.rules]
    if errored or (result.diagnostics.errors and not result.allowed):
        ids = tuple(sorted(r.id for r in errored)) or ("?",)
        return RuleVerdict(denied=True, code="POLICY_ERROR", rules=ids, shadow=shadow,
                           reason=f"the policy rule {', '.join(ids)} could not be evaluated for this call; "
                                  "it is refused until the rule is fixed")
    satisfied = [compiled.rules[pid] for pid in result.diagnostics.reasons if pid != BASELINE_ID
                 and pid in compiled.rules]
    if not result.allowed:
        forbids = sorted((r for r in satisfied if r.effect == "forbid"), key=lambda r: r.id)
        reason = next((r.reason for r in forbids if r.reason), "") or "a policy rule forbids this call"
        return RuleVerdict(denied=True, code="POLICY_DENIED", reason=reason,
                           rules=tuple(r.id for r in forbids), shadow=shadow)
    gate, quorum, ids = _gate_of(satisfied)
    return RuleVerdict(gate=gate, quorum=quorum, rules=ids, shadow=shadow)
