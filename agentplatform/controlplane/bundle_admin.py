"""Admin of policy bundles (docs/policy.md, "Applying a bundle"): the versions of a tenant's
bundle (list; detail with its source, rules and limits) and a page to upload or paste a new one,
validate it, see the diff against the version in force and apply it, or see that it was sent for a
second person's approval (agentplatform.controlplane.bundles). A tenant administrator sees only
their tenant's versions (another tenant's answers 404) and applies only to their tenant; a
platform operator picks the tenant. Versions are immutable: no change or delete.

Registered here, not in policies.admin: applying needs the tool catalog and the control plane,
both above policies.
"""
from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from agentplatform.controlplane.bundles import policy_bundle_apply
from agentplatform.tenancy.admin_scope import TenantScopedAdminMixin
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR
from core.errors import DomainError
from policies.compiler import compile_stored
from policies.errors import BundleInvalid
from policies.models import PolicyBundle


class BundleForm(forms.Form):
    """Upload or paste a bundle. `tenant` is shown to platform operators only."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.order_by("slug"), required=False,
                                    label="Tenant / 租户")
    upload = forms.FileField(required=False, label="Bundle file (YAML or JSON) / 策略包文件")
    source = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 18, "cols": 100,
                                                                           "spellcheck": "false"}),
                             label="…or paste it / 或粘贴内容")
    comment = forms.CharField(required=False, max_length=500, label="Comment / 备注")

    def clean(self):
        data = super().clean()
        if not data.get("upload") and not (data.get("source") or "").strip():
            raise forms.ValidationError("Upload a file or paste a bundle / 请上传文件或粘贴内容")
        return data


def _bundle_bytes(data: dict) -> bytes:
    """The bundle as bytes: the uploaded file (read no further than the size cap allows), else the
    pasted text. Raises BundleInvalid for a file over settings.POLICY_BUNDLE_MAX_BYTES."""
    upload = data.get("upload")
    if upload is None:
        return data["source"].replace("\r\n", "\n").encode("utf-8")
    limit = settings.POLICY_BUNDLE_MAX_BYTES
    if upload.size > limit:
        raise BundleInvalid([{"where": "file", "message": f"the bundle is {upload.size} bytes; at most {limit} "
                                                          "are accepted"}])
    return upload.read(limit + 1)


class PolicyBundleAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Versions are read-only; "Add" is the upload / validate / apply page."""

    list_display = ("tenant", "version", "in_force", "created_by", "created_at", "comment", "digest_short")
    list_display_links = ("tenant", "version")
    list_filter = ("tenant",)
    list_select_related = ("tenant", "created_by")
    fields = ("tenant", "version", "in_force", "created_by", "created_at", "comment", "digest", "rules_shown",
              "limits_shown", "source_shown")
    readonly_fields = fields
    tenant_admin_can = frozenset({"view", "add"})

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description=_("in force"))
    def in_force(self, obj: PolicyBundle) -> bool:
        top = PolicyBundle.objects.filter(tenant_id=obj.tenant_id).order_by("-version").values_list(
            "version", flat=True).first()
        return top == obj.version

    in_force.boolean = True

    @admin.display(description=_("digest"))
    def digest_short(self, obj: PolicyBundle) -> str:
        return obj.digest[:12]

    @admin.display(description=_("source"))
    def source_shown(self, obj: PolicyBundle) -> str:
        return format_html('<pre data-testid="bundle-source">{}</pre>', obj.source)

    @admin.display(description=_("rules"))
    def rules_shown(self, obj: PolicyBundle) -> str:
        try:
            compiled = compile_stored(version=obj.version, cedar=obj.cedar, limits=obj.limits)
        except BundleInvalid as error:
            return f"does not compile / 无法编译: {error.message}"
        rows = format_html_join("", "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                    "<td>{}</td><td>{}</td></tr>",
                                ((r.id, r.effect, r.gate or "—", r.quorum if r.gate == "approval" else "—",
                                  "shadow" if r.shadow else "enforce", ", ".join(sorted(r.tools)) or "every tool",
                                  r.reason or "—") for r in compiled.rules.values()))
        return format_html('<table data-testid="bundle-rules"><thead><tr><th>id</th><th>effect / 效果</th>'
                           '<th>gate / 关卡</th><th>quorum / 人数</th><th>mode / 模式</th><th>tools / 工具</th>'
                           '<th>reason / 理由</th></tr></thead><tbody>{}</tbody></table>', rows)

    @admin.display(description=_("limits"))
    def limits_shown(self, obj: PolicyBundle) -> str:
        def sum_of(limit: dict) -> str:
            total = limit.get("max_sum")
            return f"{total['argument']} ≤ {total['value']}" if total else "—"

        rows = format_html_join("", "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                    "<td>{}</td><td>{}</td><td>{}</td></tr>",
                                ((lim["id"], lim["tool"], lim["per"], lim["window_seconds"],
                                  lim.get("max_count") if lim.get("max_count") is not None else "—", sum_of(lim),
                                  lim["when_exceeded"] + (f" ({lim['quorum']})" if lim.get("quorum") else ""),
                                  lim.get("mode", "enforce")) for lim in obj.limits))
        return format_html('<table data-testid="bundle-limits"><thead><tr><th>id</th><th>tool / 工具</th>'
                           '<th>per / 按</th><th>window (s) / 窗口</th><th>max count / 次数</th>'
                           '<th>max sum / 金额</th><th>when exceeded / 超出时</th><th>mode / 模式</th></tr></thead>'
                           '<tbody>{}</tbody></table>', rows)

    # -- upload, validate, diff, apply ------------------------------------------------------------

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None):
        """GET: the form. POST with "check": validate and show the diff and what it loosens. POST
        with "apply": apply it (redirect to the new version) or show that it was proposed (link to
        the pending change). Errors are listed with where and why; nothing is stored then."""
        role = self.role(request)
        if role not in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR):
            raise Http404("no access")
        operator = role == PLATFORM_OPERATOR
        form = BundleForm(request.POST or None, request.FILES or None)
        if not operator:
            form.fields.pop("tenant")
        context = {"errors": [], "outcome": None, "tenant": None}
        if request.method == "POST" and form.is_valid():
            tenant = form.cleaned_data.get("tenant") if operator else request.user.tenant
            if tenant is None:
                form.add_error("tenant", "Choose the tenant / 请选择租户")
            else:
                context["tenant"] = tenant
                response = self._submit(request, form, tenant, context)
                if response is not None:
                    return response
        opts = self.model._meta
        context.update({**self.admin_site.each_context(request), "opts": opts, "form": form,
                        "title": _("Apply a policy bundle"), "has_view_permission": True,
                        "versions": self.get_queryset(request).select_related("tenant")[:10]})
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/policies/policybundle/apply.html", context)

    def _submit(self, request: HttpRequest, form: BundleForm, tenant: Tenant, context: dict):
        check = "apply" not in request.POST
        try:
            raw = _bundle_bytes(form.cleaned_data)
            outcome = policy_bundle_apply(tenant=tenant, text=raw, actor=request.user, check=check,
                                          comment=form.cleaned_data.get("comment") or "")
        except BundleInvalid as error:
            context["errors"] = error.errors
            return None
        except DomainError as error:
            context["errors"] = [{"where": error.code, "message": error.message}]
            return None
        if form.cleaned_data.get("upload") is not None and check:
            # keep what was uploaded in the text box, so "Apply" sends the same bundle
            form.data = form.data.copy()
            form.data["source"] = raw.decode("utf-8")
        context["outcome"] = outcome
        if outcome.status == "applied":
            self.message_user(request, _("Applied: %(tenant)s v%(version)s is in force (was v%(previous)s)") % {
                "tenant": tenant.slug, "version": outcome.version, "previous": outcome.previous}, messages.SUCCESS)
            row = PolicyBundle.objects.get(tenant=tenant, version=outcome.version)
            return HttpResponseRedirect(reverse("admin:policies_policybundle_change", args=[row.pk]))
        if outcome.status == "pending":
            self.message_user(request, format_html(
                '{} [{}]: <a href="{}">{}</a>', _("This bundle loosens a HIGH or CRITICAL tool: it was sent to a second administrator (or a "
                  "platform operator) for approval"),
                outcome.code, reverse("admin:controlplane_pendingcontrolchange_change", args=[outcome.change.pk]),
                outcome.change.pk), messages.WARNING)
            return HttpResponseRedirect(reverse("admin:controlplane_pendingcontrolchange_change",
                                                args=[outcome.change.pk]))
        if outcome.status == "unchanged":
            self.message_user(request, _("Unchanged: identical to v%(version)s in force") % {"version": outcome.version}, messages.INFO)
        return None
