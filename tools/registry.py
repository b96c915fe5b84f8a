"""The tool registry: what a tool is, in code. The database mirror (tools.models.Tool) carries
admin overrides and object permissions; risk and policy never come from a tool's self-description
at run time: a tool cannot lower its own risk."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

from pydantic import BaseModel

from tools.context import ToolContext

DEFAULT_POLICY = {"LOW": "NONE", "MEDIUM": "NONE", "HIGH": "REQUESTER", "CRITICAL": "APPROVERS"}


def _identity(data: Any) -> Any:
    return data


class EditRule(StrEnum):
    """How an approver may change one argument of a gated call (`ToolSpec.editable`).

    ANY: any value the tool's schema, business rules and precheck accept (a reason).
    DECREASE_ONLY: a number never above what the requester asked for (their arguments before
    any edit, so successive edits cannot ratchet it up); money is compared in the currency's
    minor unit (tools.money, with `ToolSpec.currency`). Not given (None) means "all of it"
    (refund_order's full refund): None -> a number is a decrease, a number -> None is not.
    An argument a tool does not name in `editable` cannot be edited at all (docs/approvals.md).
    """

    ANY = "ANY"
    DECREASE_ONLY = "DECREASE_ONLY"


@dataclass(frozen=True)
class ToolSpec:
    """One registered tool.

    name: wire name. description: for the model. parameters: pydantic model with extra="forbid".
    risk: LOW/MEDIUM/HIGH/CRITICAL. permission: Django permission ("app.codename") the user needs
    besides `use_tool`. policy: NONE/REQUESTER/APPROVERS/DENY (default from risk). quorum: approvals
    needed for APPROVERS (CRITICAL is never below 2). ttl_seconds: confirmation lifetime.
    execute(ctx, params) -> dict: the business function, run inside the pipeline's transaction; what
    it wrote before raising ToolBusinessError is undone by a savepoint. read_only: it only reads (as
    MCP's `readOnlyHint`); it then runs without the savepoint, and a write statement from it fails
    the call (tools.idempotency.run_action). validate(params): business rules, raises
    ToolValidationError. idempotency_key(ctx, params) -> str | None. result_converter(data) -> dict:
    allow-list and masking. summarize(params) -> str: what a human confirms. return_direct: results
    are the answer. business_result_id(data) -> str: id recorded in audit.
    precheck(ctx, params): read-only business check run before a human is asked and again, inside
    the consuming transaction, before execution; raises ToolBusinessError (with its code) for a
    call that cannot succeed, so it never costs a human's attention (docs/decisions.md).
    business_object(params) -> str: the business object the call acts on (e.g. "order:A2026..."):
    a newer gated request for the same tool and object supersedes an older open one.
    normalize(ctx, params) -> params: read-only, tenant-scoped canonicalisation of the validated
    parameters before they are hashed, shown or executed (money to the currency's minor unit,
    tools.money); raises ToolValidationError (INVALID_ARGUMENTS).
    editable: {argument name: EditRule} an approver may change, and how; every other argument is
    fixed (default: nothing editable, which is every remote tool's). An edit outside it is refused
    with EDIT_NOT_ALLOWED; the direction is judged against the requester's own arguments, never
    an earlier edit (tools.approval_edit, docs/approvals.md). Example:
    `editable={"amount": EditRule.DECREASE_ONLY, "reason": EditRule.ANY}`.
    currency(ctx, params) -> str | None: the ISO 4217 code of the call's money arguments (read-only,
    tenant-scoped), used to normalise them and to compare an edited amount in minor units.
    approval_context(ctx, params) -> dict: read-only, tenant-scoped facts a human needs beside the
    arguments (order total, status, earlier refunds, ...); captured (masked) when a confirmation
    is requested and recomputed live on the approval card (docs/approvals.md). Never raises for a
    missing object: it says so in the facts.
    describe(params, facts) -> str: the summary built from the validated arguments and the
    approval context; preferred over `summarize`. Neither may quote free text.
    free_text: names of arguments the model writes in its own words (a reason): never part of a
    summary; shown quoted, capped and labelled "written by the assistant".
    policy_arguments(ctx, params) -> dict: read-only, tenant-scoped values of optional arguments the
    tool resolves itself, as policy rules and limits read them (a full refund's amount: the
    refundable remainder), so omitting an argument never slips a call under a rule
    (docs/policy.md). policy_fills: the names it always fills; the Cedar schema declares them
    required.
    title: what people read instead of the wire name, bilingual ("Refund an order / 订单退款");
    empty: derived from the name (tools.display.tool_label).
    owner / version: who answers for the tool and its version (shown in the
    admin and the API, recorded in every audit row). source: "local" or "mcp:<server>". remote: for
    a tool served by an MCP server, the object that calls it (mcp_sources.remote.RemoteCall): the
    pipeline then claims the call durably before the request (docs/remote_tools.md).
    """

    name: str
    description: str
    parameters: type[BaseModel]
    execute: Callable[[ToolContext, Any], Any]
    risk: str = "LOW"
    permission: str = ""
    policy: str = ""
    quorum: int = 1
    ttl_seconds: int = 900
    validate: Callable[[Any], None] | None = None
    idempotency_key: Callable[[ToolContext, Any], str | None] | None = None
    result_converter: Callable[[Any], Any] = _identity
    summarize: Callable[[Any], str] | None = None
    business_result_id: Callable[[Any], str] | None = None
    return_direct: bool = False
    read_only: bool = False
    precheck: Callable[[ToolContext, Any], None] | None = None
    business_object: Callable[[Any], str] | None = None
    normalize: Callable[[ToolContext, Any], Any] | None = None
    approval_context: Callable[[ToolContext, Any], dict[str, Any]] | None = None
    describe: Callable[[Any, dict[str, Any]], str] | None = None
    free_text: tuple[str, ...] = ()
    policy_arguments: Callable[[ToolContext, Any], dict[str, Any]] | None = None
    policy_fills: tuple[str, ...] = ()
    editable: Mapping[str, EditRule] = field(default_factory=dict)
    currency: Callable[[ToolContext, Any], str | None] | None = None
    title: str = ""
    owner: str = ""
    version: str = ""
    source: str = "local"
    remote: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def default_policy(self) -> str:
        return self.policy or DEFAULT_POLICY[self.risk]

    def definition(self) -> dict[str, Any]:
        """The ToolDefinition in OpenAI's wire format: name, description, JSON Schema. Nothing else."""
        schema = self.parameters.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": schema}}

    def summary(self, params: BaseModel, facts: dict[str, Any] | None = None) -> str:
        """What a human confirms, in the platform's words: `describe(params, facts)`, else
        `summarize(params)`, else the tool name with its non-free-text arguments as JSON."""
        if self.describe is not None:
            return self.describe(params, facts or {})
        if self.summarize is not None:
            return self.summarize(params)
        shown = params.model_dump(mode="json", exclude=set(self.free_text))
        return f"{self.name}({json.dumps(shown, ensure_ascii=False, sort_keys=True)})"

    def context(self, ctx: ToolContext, params: BaseModel) -> dict[str, Any]:
        """The tool's approval context for (ctx, params), or {} when it declares none."""
        return dict(self.approval_context(ctx, params)) if self.approval_context is not None else {}

    def assistant_text(self, params: BaseModel) -> dict[str, str]:
        """The free-text arguments the model wrote: {name: text} (non-empty strings only)."""
        values = params.model_dump(mode="json", include=set(self.free_text))
        return {k: v for k, v in values.items() if isinstance(v, str) and v.strip()}


class ToolRegistry:
    """Name -> ToolSpec. `register` refuses duplicates and parameter models that allow extras."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._providers: list[Callable[[str], ToolSpec | None]] = []

    def add_provider(self, provider: Callable[[str], ToolSpec | None]) -> None:
        """Register a lookup for tools not defined in code (a higher app, mcp_sources, builds the
        specs of remote tools from their reviewed Tool rows). provider(name) -> ToolSpec | None."""
        if provider not in self._providers:
            self._providers.append(provider)

    def register(self, spec: ToolSpec) -> ToolSpec:
        """Add a tool. Raises ValueError on a duplicate name, a parameter model without extra='forbid',
        an unknown risk, or `editable` naming an argument the parameter model does not have."""
        if spec.name in self._tools:
            raise ValueError(f"tool {spec.name!r} is already registered")
        if spec.parameters.model_config.get("extra") != "forbid":
            raise ValueError(f"{spec.name}: parameter model must set extra='forbid'")
        if spec.risk not in DEFAULT_POLICY:
            raise ValueError(f"{spec.name}: unknown risk {spec.risk!r}")
        unknown = sorted(set(spec.editable) - set(spec.parameters.model_fields))
        if unknown or any(not isinstance(rule, EditRule) for rule in spec.editable.values()):
            raise ValueError(f"{spec.name}: editable names unknown arguments {unknown} or rules that are not EditRule")
        self._tools[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        """The spec of `name`: a tool in code, else what a provider returns (remote tools), else None."""
        spec = self._tools.get(name)
        if spec is None:
            for provider in self._providers:
                spec = provider(name)
                if spec is not None:
                    break
        return spec

    def all(self) -> list[ToolSpec]:
        """The tools defined in code (remote tools are not listed: they live in the database)."""
        return list(self._tools.values())

    def unregister(self, name: str) -> None:
        """Remove a tool (tests register throwaway tools)."""
        self._tools.pop(name, None)


registry = ToolRegistry()


def tool(**options: Any) -> Callable[[Callable[[ToolContext, Any], Any]], ToolSpec]:
    """Decorator registering `execute(ctx, params)` as a tool; options are ToolSpec fields.

    Example::

        @tool(name="query_inventory", description="...", parameters=QueryInventory, risk="MEDIUM",
              permission="catalog.view_stocklevel")
        def query_inventory(ctx, params): ...
    """

    def decorate(fn: Callable[[ToolContext, Any], Any]) -> ToolSpec:
        return registry.register(ToolSpec(execute=fn, **options))

    return decorate
