"""What the admin calls each model, in the administrator's language (agentplatform.web.admin_language).

The names are display text for people, not schema: they are set on each model's options when the
admin loads (`name_models`), so changing or translating them needs no migration in apps whose
migrations belong to their own owners. Django's migration state reads a model's declared Meta
(`_meta.original_attrs`), which this does not touch. The English stays what the admin showed
before; the Chinese is in locale/zh_Hans.
"""
from __future__ import annotations

from django.apps import apps
from django.utils.translation import gettext_lazy as _, pgettext_lazy

NAMES = {
    "auth.group": (_("group"), _("groups")),
    "audit.auditevent": (_("audit event"), _("audit events")),
    "approvals.confirmationrequest": (_("confirmation request"), _("confirmation requests")),
    "approvals.approval": (_("approval"), _("approvals")),
    "tools.idempotencyrecord": (_("idempotency record"), _("idempotency records")),
    "tools.tenanttoolpolicy": (_("tenant tool policy"), _("tenant tool policies")),
    "tools.tool": (_("tool"), _("tools")),
    "policies.killswitch": (_("kill switch"), _("kill switches")),
    "policies.policybundle": (_("policy bundle"), _("policy bundles")),
    "tenancy.tenant": (_("tenant"), _("tenants")),
    "tenancy.user": (_("user"), _("users")),
    "catalog.stocklevel": (_("stock level"), _("stock levels")),
    "catalog.order": (pgettext_lazy("business", "order"), pgettext_lazy("business", "orders")),
    "catalog.cancellation": (_("cancellation"), _("cancellations")),
    "catalog.refund": (_("refund"), _("refunds")),
    "mcp_sources.mcpserver": (_("MCP server"), _("MCP servers")),
    "mcp_sources.mcptool": (_("MCP tool"), _("MCP tools")),
    "runtime.conversation": (_("conversation"), _("conversations")),
    "runtime.run": (_("run"), _("runs")),
    "runtime.runevent": (_("run event"), _("run events")),
    "runtime.tenantmodelquota": (_("tenant model quota"), _("tenant model quotas")),
    "runtime.modelcallcount": (_("model call count"), _("model call counts")),
    "notifications.webhookendpoint": (_("webhook endpoint"), _("webhook endpoints")),
    "notifications.webhookdelivery": (_("webhook delivery attempt"), _("webhook delivery attempts")),
    "api.httpidempotencykey": (_("HTTP idempotency key"), _("HTTP idempotency keys")),
    "api.apikey": (_("API key"), _("API keys")),
    "controlplane.pendingcontrolchange": (_("pending control change"), _("pending control changes")),
}

APP_NAMES = {
    "runtime": _("Agent runtime"),
    "tenancy": _("Tenants and users"),
    "controlplane": _("Control plane"),
    "api": _("REST API"),
    "policies": _("Policy bundles (Cedar rules and limits)"),
    "audit": _("Audit trail"),
    "approvals": _("Confirmations and approvals"),
    "notifications": _("Notifications"),
    "catalog": _("Built-in catalog (demo business data)"),
    "tools": _("Tools"),
    "mcp_sources": _("MCP servers (remote tool sources)"),
}


def name_models() -> None:
    """Give each model in NAMES, and each app in APP_NAMES, its translatable name (idempotent).
    A label no longer installed is skipped."""
    for label, (singular, plural) in NAMES.items():
        app_label, model_name = label.split(".")
        try:
            model = apps.get_model(app_label, model_name)
        except LookupError:
            continue
        model._meta.verbose_name = singular
        model._meta.verbose_name_plural = plural
    for app_label, name in APP_NAMES.items():
        try:
            apps.get_app_config(app_label).verbose_name = name
        except LookupError:
            continue
