"""Try a call (admin, `/admin/policies/try/`): a tenant administrator names a tool of their
tenant's catalog, its arguments (JSON) and a requester of their tenant, and reads what the
pipeline would decide now: the verdict, the gate, the quorum, the bundle version, every rule and
limit that decided it, and what shadow rules would have done (docs/policy.md, "Try a call").

It runs the pipeline's own steps, in the pipeline's order, and writes nothing (no request, no
audit row, no shadow verdict, no limit usage): the tool offered to the requester
(tools.selectors.offered_tools, else tools.selectors.tool_unavailable_reason), the arguments
validated and normalised (tools.governed_call.validated_arguments / normalized_arguments), the
gate (tools.policy.effective_policy, then tools.gate.gate_call), then the limits' dry run
(`limits_dry_run`, an adapter to policies.limits.limits_judge with reserve=False; "limits: not
evaluated" while that function is not installed).

Platform operators may try a call for any tenant's member; a tenant administrator only for a
member of their own tenant. The page's URLs are added to the admin site here
(`policy_admin_urls`), with the shadow report's (tools.admin.policy_shadow), and both are listed
under "Policies" on the admin index (`policy_admin_entries`).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import Q
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse

from agentplatform.tenancy.admin_scope import tenant_users
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role
from policies.engine import Shadowed
from policies.limits import limits_judge
from policies.selectors import bundle_in_force
from tools.context import ToolContext
from tools.errors import ToolBusinessError
from tools.execution import limits_gate
from tools.gate import Gate, gate_call
from tools.governed_call import ArgumentsInvalid, normalized_arguments, validated_arguments
from tools.levels import ApprovalPolicy
from tools.models import TenantToolPolicy, Tool
from tools.policy import EffectivePolicy, effective_policy
from tools.registry import ToolSpec, registry
from tools.selectors import offered_tools, tool_unavailable_reason

# -- the dry run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitsDryRun:
    """What the bundle's limits would do to the call, counted without reserving anything.

    evaluated: False when the limits could not be judged here (note says why: "limits: not
    evaluated ..."). gate: the gate after the limits (the rules' gate when none applies or none is
    exceeded). rules: the ids of the limits that set that gate. shadow: what shadow limits would
    have done. details: what the limits module reported, as a list of dicts (shown as is)."""

    evaluated: bool
    note: str = ""
    gate: Gate | None = None
    rules: tuple[str, ...] = ()
    shadow: tuple[Shadowed, ...] = ()
    details: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TriedCall:
    """The verdict of one tried call.

    tool / requester: what was tried. arguments: the normalised arguments (JSON); judged: the
    arguments as rules and limits read them (with what the tool fills in, e.g. a full refund's
    amount). base: the registry's policy with the operator's and the tenant's overrides, before
    the bundle. rules_gate: the gate after the bundle's Cedar rules. gate: the final gate (after
    the limits). limits: the limits' dry run. refused: (code, message) when the pipeline would
    refuse the call before any rule (the tool is not offered to the requester), else None.
    precheck: (code, message) when the tool's read-only business precheck, which the pipeline
    runs before it asks anyone, would refuse a gated call now (e.g. REFUND_EXCEEDS_AMOUNT), else
    None; it does not change the policy's verdict."""

    tool: str
    requester: Any
    arguments: dict[str, Any]
    judged: dict[str, Any]
    base: EffectivePolicy
    rules_gate: Gate
    gate: Gate
    limits: LimitsDryRun
    refused: tuple[str, str] | None = None
    precheck: tuple[str, str] | None = None

    @property
    def verdict(self) -> str:
        """DENIED, APPROVERS (N approvers), REQUESTER (the requester confirms) or ALLOWED."""
        if self.refused is not None or self.gate.denied:
            return "DENIED"
        if self.gate.policy.policy == ApprovalPolicy.APPROVERS:
            return "APPROVERS"
        if self.gate.policy.policy == ApprovalPolicy.REQUESTER:
            return "REQUESTER"
        return "ALLOWED"

    @property
    def code(self) -> str:
        """The stable code of a denial (POLICY_DENIED, POLICY_ERROR, LIMIT_EXCEEDED, TOOL_STOPPED,
        PERMISSION_DENIED, TOOL_DISABLED, ...), "" when the call is not denied."""
        if self.refused is not None:
            return self.refused[0]
        return self.gate.code if self.gate.denied else ""

    @property
    def reason(self) -> str:
        """Why it is denied, in the words the model and the requester read; "" otherwise."""
        if self.refused is not None:
            return self.refused[1]
        return self.gate.reason if self.gate.denied else ""

    @property
    def verdict_text(self) -> str:
        """The verdict in English / Chinese."""
        if self.verdict == "DENIED":
            return f"denied: {self.code} / 拒绝：{self.code}"
        if self.verdict == "APPROVERS":
            quorum = self.gate.policy.quorum
            return f"needs {quorum} approver{'s' if quorum != 1 else ''} / 需要 {quorum} 位审批人批准"
        if self.verdict == "REQUESTER":
            return "needs the requester's confirmation / 需要申请人确认"
        return "allowed: runs without asking / 允许：直接执行"

    @property
    def deciding(self) -> tuple[str, ...]:
        """Every rule and limit that set the final gate (or denied it)."""
        return self.gate.rules

    @property
    def shadow(self) -> tuple[Shadowed, ...]:
        """What shadow rules and shadow limits would have done (recorded in real calls, never here)."""
        return tuple(self.rules_gate.shadow) + tuple(self.limits.shadow)


class TryInvalid(Exception):
    """The tried call cannot be judged: `field` (tool, requester, arguments) and `message`;
    `errors` lists field errors of the arguments ({"field", "error"}) when the schema refused them."""

    def __init__(self, field_name: str, message: str, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.field, self.message, self.errors = field_name, message, errors or []


def _tool_row(tool_name: str, tenant_id: int) -> tuple[ToolSpec, Tool]:
    """The registered tool `tool_name` as the tenant sees it (a shared tool or the tenant's own
    remote tool), with its TenantToolPolicy attached as `row.tenant_policy` the way
    tools.selectors.offered_tools attaches it. Raises TryInvalid("tool")."""
    spec = registry.get(tool_name)
    row = (Tool.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id), name=tool_name).first()
           if spec is not None else None)
    if row is None:
        raise TryInvalid("tool", f"unknown tool {tool_name[:100]!r}: not in this tenant's catalog / "
                                 "未知工具：不在该租户的工具目录中")
    row.tenant_policy = TenantToolPolicy.objects.filter(tenant_id=tenant_id, tool=row, enabled=True).first()
    return spec, row


def try_call(*, requester: Any, tool_name: str, arguments: str) -> TriedCall:
    """What the pipeline would decide now for `requester` (a member of a tenant) calling
    `tool_name` with `arguments` (the JSON text a model would send). Writes nothing.

    Returns a TriedCall. Raises TryInvalid: an unknown tool (field "tool"), arguments the pipeline
    would refuse with INVALID_ARGUMENTS, with the pipeline's message and field errors (field
    "arguments"). A tool that is not offered to the requester is not an error: its verdict is the
    pipeline's refusal (PERMISSION_DENIED, TOOL_DISABLED, ...), and the rules are still judged to
    show what they would do once it is.
    """
    with transaction.atomic():  # reads only; rolled back all the same, so nothing can stay behind
        tried = _tried(requester, tool_name, arguments)
        transaction.set_rollback(True)
    return tried


def _tried(requester: Any, tool_name: str, arguments: str) -> TriedCall:
    tenant_id = requester.tenant_id
    ctx = ToolContext(tenant=requester.tenant, user=requester, conversation_id=uuid.uuid4(),
                      request_id="policy-try")
    offered = offered_tools(user=requester)
    refused = None
    if tool_name in offered:
        spec, row = offered[tool_name]
    else:
        spec, row = _tool_row(tool_name, tenant_id)
        refused = tool_unavailable_reason(name=tool_name, user=requester, tenant_id=tenant_id)
    try:
        params = normalized_arguments(ctx, spec, validated_arguments(spec, arguments))
    except ArgumentsInvalid as exc:
        raise TryInvalid("arguments", f"INVALID_ARGUMENTS: {exc.message}",
                         (exc.data or {}).get("errors")) from None
    normalized = params.model_dump(mode="json")
    if refused is None and spec.permission and not requester.has_perm(spec.permission):
        refused = ("PERMISSION_DENIED", f"the requester lacks the permission {spec.permission}")
    base = effective_policy(spec, row)
    rules_gate, judged = gate_call(ctx, spec, params, normalized, base)
    limits = (LimitsDryRun(evaluated=True, note="not reached: the rules deny the call", gate=rules_gate)
              if rules_gate.denied else limits_dry_run(ctx, spec, rules_gate, judged))
    gate = limits.gate or rules_gate
    precheck = None
    if gate.policy.gated and spec.precheck is not None:
        try:
            spec.precheck(ctx, params)
        except ToolBusinessError as error:
            precheck = (error.code, error.message)
    return TriedCall(tool=tool_name, requester=requester, arguments=normalized, judged=judged, base=base,
                     rules_gate=rules_gate, gate=gate, limits=limits, refused=refused, precheck=precheck)


def limits_dry_run(ctx: ToolContext, spec: ToolSpec, gate: Gate, arguments: dict[str, Any]) -> LimitsDryRun:
    """The bundle's limits judged for this call without reserving anything: the pipeline's
    `policies.limits.limits_judge` with reserve=False (tools.propose calls it with reserve=True),
    its verdict applied to `gate` by the pipeline's own `tools.execution.limits_gate`.

    arguments: the call's arguments as policy reads them (with the tool's fills). Returns a
    LimitsDryRun. Raises what limits_judge raises for a real error."""
    compiled = bundle_in_force(ctx.tenant_id)
    applying = compiled.limits_for(spec.name) if compiled is not None and gate.version is not None else []
    if not applying:
        return LimitsDryRun(evaluated=True, note="no limit of the bundle applies to this tool", gate=gate)
    verdict = limits_judge(tenant_id=ctx.tenant_id, user_id=ctx.user_id, tool_name=spec.name, limits=applying,
                           arguments=arguments, reserve=False)
    details = [judged.public() for judged in verdict.judged]
    final = limits_gate(gate, verdict)
    exceeded = tuple(verdict.rules or ())
    rules = tuple(r for r in final.rules if r in exceeded)
    note = "" if rules else ("exceeded, but the gate is already as strict / 已超出，但闸门已同样严格" if exceeded
                             else "no limit is exceeded")
    return LimitsDryRun(evaluated=True, gate=final, rules=rules, shadow=tuple(verdict.shadow), details=details,
                        note=note)


# -- the admin page -------------------------------------------------------------------------------


def _scope(request: HttpRequest) -> tuple[str, int | None]:
    """(role, tenant id or None for an operator); Http404 for anyone else."""
    role = admin_role(request.user)
    if role == PLATFORM_OPERATOR:
        return role, None
    if role == TENANT_ADMINISTRATOR:
        return role, request.user.tenant_id
    raise Http404("no access")


def requesters_for(tenant_id: int | None):
    """The users a viewer may try a call for: members of their tenant (any tenant's for an operator)."""
    users = User.objects.filter(tenant__isnull=False, is_active=True) if tenant_id is None else tenant_users(tenant_id)
    return users.select_related("tenant").order_by("username")


def tools_for(tenant_id: int | None) -> list[Tool]:
    """The registered tools a viewer may try, by name: shared tools and their tenant's own remote
    tools (every tool for an operator)."""
    tools = Tool.objects.all() if tenant_id is None else Tool.objects.filter(
        Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
    return [row for row in tools.order_by("name") if registry.get(row.name) is not None]


class TryForm(forms.Form):
    """A tool name, a requester's username and the arguments (a JSON object)."""

    tool = forms.CharField(max_length=100, label="Tool / 工具")
    requester = forms.CharField(max_length=150, label="Requester / 申请人")
    arguments = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false"}),
                                label="Arguments (JSON) / 参数（JSON）", initial="{}", strip=False)

    def __init__(self, *args, tenant_id: int | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_id = tenant_id

    def clean_requester(self) -> Any:
        username = self.cleaned_data["requester"].strip()
        user = requesters_for(self.tenant_id).filter(username=username).first()
        if user is None:  # another tenant's member is not named: nothing tells the two apart
            raise forms.ValidationError(f"no member {username[:150]!r} in your tenant / 您的租户中没有该用户")
        return user

    def clean_tool(self) -> str:
        name = self.cleaned_data["tool"].strip()
        if name not in {row.name for row in tools_for(self.tenant_id)}:
            raise forms.ValidationError(f"unknown tool {name[:100]!r}: not in your tenant's catalog / "
                                        "未知工具：不在您租户的工具目录中")
        return name

    def clean_arguments(self) -> str:
        text = self.cleaned_data["arguments"]
        try:
            json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc} / 不是有效的 JSON") from None
        return text

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        user, tool = data.get("requester"), data.get("tool")
        if user is not None and tool and not Tool.objects.filter(
                Q(tenant__isnull=True) | Q(tenant_id=user.tenant_id), name=tool).exists():
            self.add_error("tool", f"unknown tool {tool!r} in the requester's tenant / 申请人所在租户没有该工具")
        return data


def try_view(request: HttpRequest) -> TemplateResponse:
    """GET: the form (a tool and a requester may be preset with ?tool=&requester=). POST: the form
    with the verdict of the tried call, or its errors. Nothing is written either way."""
    role, tenant_id = _scope(request)
    source = request.POST if request.method == "POST" else None
    form = TryForm(source, tenant_id=tenant_id, initial={k: request.GET[k] for k in ("tool", "requester")
                                                         if k in request.GET})
    tried, errors = None, []
    if source is not None and form.is_valid():
        try:
            tried = try_call(requester=form.cleaned_data["requester"], tool_name=form.cleaned_data["tool"],
                             arguments=form.cleaned_data["arguments"])
        except TryInvalid as exc:
            form.add_error(exc.field, exc.message)
            errors = exc.errors
    context = {**admin.site.each_context(request), "title": "Try a call / 试运行调用", "form": form, "tried": tried,
               "argument_errors": errors, "requesters": requesters_for(tenant_id), "tools": tools_for(tenant_id),
               "operator": role == PLATFORM_OPERATOR,
               "bundle": bundle_in_force(tried.requester.tenant_id) if tried else None}
    request.current_app = admin.site.name
    return TemplateResponse(request, "admin/policies/try_call.html", context)


# -- wiring into the admin site -------------------------------------------------------------------


def policy_admin_urls() -> list:
    """The URLs of the policy pages of the admin site (try a call, the shadow report)."""
    from tools.admin.policy_shadow import shadow_calls_view, shadow_report_view

    wrap = admin.site.admin_view
    return [path("policies/try/", wrap(try_view), name="policies_try"),
            path("policies/shadow/", wrap(shadow_report_view), name="policies_shadow"),
            path("policies/shadow/calls/", wrap(shadow_calls_view), name="policies_shadow_calls")]


def policy_admin_entries(request: HttpRequest, app_list: list[dict]) -> list[dict]:
    """`app_list` (AdminSite.get_app_list) with "Try a call" and "Shadow report" listed under the
    Policies app for operators and tenant administrators (the app is added when no model of it is)."""
    if admin_role(request.user) not in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR):
        return app_list
    entries = [{"name": "Try a call / 试运行调用", "object_name": "PolicyTry", "admin_url": reverse("admin:policies_try"),
                "add_url": None, "view_only": True, "perms": {"view": True}},
               {"name": "Shadow report / 影子规则报告", "object_name": "PolicyShadowReport",
                "admin_url": reverse("admin:policies_shadow"), "add_url": None, "view_only": True,
                "perms": {"view": True}}]
    app = next((a for a in app_list if a.get("app_label") == "policies"), None)
    if app is None:
        app = {"name": "Policies", "app_label": "policies", "app_url": entries[0]["admin_url"],
               "has_module_perms": True, "models": []}
        app_list = sorted([*app_list, app], key=lambda a: a["name"].lower())
    app["models"] = [*app["models"], *(e for e in entries if e["object_name"] not in
                                       {m.get("object_name") for m in app["models"]})]
    return app_list


def _install(site: admin.AdminSite) -> None:
    """Add the policy pages' URLs and index entries to `site` (once)."""
    if getattr(site, "_policy_pages", False):
        return
    site._policy_pages = True
    get_urls, get_app_list = site.get_urls, site.get_app_list

    def urls() -> list:
        return policy_admin_urls() + get_urls()

    def app_list(request: HttpRequest, app_label: str | None = None) -> list[dict]:
        listed = get_app_list(request, app_label)
        if app_label not in (None, "policies"):
            return listed
        return policy_admin_entries(request, listed)

    site.get_urls, site.get_app_list = urls, app_list


_install(admin.site)
