"""Page views of the chat UI. The page is a shell: its script talks to the REST API (`/api/v1/`)
with the session cookie and CSRF token, and follows each run's Server-Sent Events."""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET

from agentplatform.runtime.demo.suggestions import suggestions
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR, admin_role, is_auditor
from approvals.selectors import may_approve
from tools.display import tool_label
from tools.registry import registry
from tools.selectors import offered_tools


def landing_url(user) -> str:
    """Where a signed-in person starts: people who may approve (approve_tool on
    some tool) land on the approver dashboard, a tenant administrator on their admin, auditors who
    are not administrators on the audit trail, everyone else on the chat."""
    if may_approve(user=user):
        return reverse("approvals:pending")
    if admin_role(user) == TENANT_ADMINISTRATOR:
        return reverse("admin:index")
    if is_auditor(user) and not user.is_staff:
        return reverse("auditor:trail")
    return reverse("chat")


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """`/`: signed-in people go to where they start (landing_url), everyone else to sign in."""
    return redirect(landing_url(request.user) if request.user.is_authenticated else settings.LOGIN_URL)


@login_required
@require_GET
@ensure_csrf_cookie
def chat(request: HttpRequest) -> HttpResponse:
    """`/chat/`: conversation list, message box, streamed answers, tool progress and confirmation
    cards. `?c=<conversation id>` opens that conversation (the script checks it through the API,
    so another user's id simply shows "not found"). The suggestions follow the tools offered to the
    user now and name only demo orders that can still succeed (agentplatform.runtime.demo.
    suggestions); `tool_labels` gives the page each tool's title for people (tools.display)."""
    tenant = getattr(request.user, "tenant", None)
    offered = set(offered_tools(user=request.user))
    names = {spec.name for spec in registry.all()} | offered
    return render(request, "chat/chat.html", {
        "conversation_id": request.GET.get("c", "")[:64],
        "suggestions": suggestions(tenant.slug if tenant is not None else None, offered=offered),
        "tool_labels": {name: tool_label(name) for name in sorted(names)},
        "model_name": settings.LLM_MODEL,
        "offline_model": not settings.LLM_API_KEY,
    })


class SignInView(LoginView):
    """Django's login view with the product's page. With the offline model (the demo set-up, no
    LLM_API_KEY) the page names the demo personas; with a real model it does not."""

    redirect_authenticated_user = True

    def get_default_redirect_url(self) -> str:
        """Without `?next=`: approvers to /approvals/, everyone else to /chat/ (landing_url)."""
        return landing_url(self.request.user)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["demo_hint"] = not settings.LLM_API_KEY
        return context
