"""Admin of the tool registry mirror, by role (docs/roles.md).

Platform operators: tools (enable, global risk/policy overrides, quorum, TTL, the written reason
for loosening a CRITICAL tool), every tenant's whitelist, guardian grants to anyone.
Tenant administrators: read the tools with the policy in effect *in their tenant*; manage their
tenant's whitelist entries and tighten-only overrides (TenantToolPolicy); grant `use_tool` /
`approve_tool` on guardian's object-permission pages to their own tenant's users and groups only.

Tool rows mirror the code registry (`tools_sync_registry`), so they are never added or deleted
here. Everything shown as "in effect" is computed by `tools.policy.effective_policy`, the function
the pipeline uses.

One module per admin: `tool` (ToolAdmin, with `grants`: its guardian pages), `tenant_policy`
(TenantToolPolicyAdmin and its actions), `kill_switches` (the tools' stop action and
KillSwitchAdmin, the stops with their release action), `idempotency` (IdempotencyRecordAdmin),
`tenant` (the Tenant admin with its tool whitelist), `policy_try` ("Try a call", and the URLs and
index entries of the policy pages) with `policy_shadow` (the shadow report); `forms` and `inlines`
hold what they share. Importing this package registers them all (Django's admin autodiscovery
imports `tools.admin`).
"""
from tools.admin import idempotency, kill_switches, policy_try, tenant, tenant_policy, tool  # noqa: F401  - registers the admins
