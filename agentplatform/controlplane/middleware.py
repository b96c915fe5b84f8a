"""Turns an administrator's guarded change in the admin into a proposal (docs/roles.md).

The guards (agentplatform.controlplane.guards) refuse, before anything is written, a change that
would empower an approver or loosen a HIGH/CRITICAL policy; the admin view's transaction rolls
back. Here, for pages of the admin site only, the refusal becomes a PendingControlChange proposed
by the signed-in administrator, and they are sent to the list of pending changes with a message
saying a second administrator must approve it. Other changes of the same form were rolled back
with it and are named as such: save them again without the guarded part. Elsewhere (the API) the
refusal is answered as the error it is (CONTROL_CHANGE_REQUIRED).
"""
from __future__ import annotations

from typing import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _

from agentplatform.controlplane.errors import ControlChangeRequired
from agentplatform.controlplane.services import control_changes_propose
from core.errors import DomainError


class ControlChangeMiddleware:
    """process_exception: ControlChangeRequired raised by an admin view -> proposals + redirect."""

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, ControlChangeRequired):
            return None
        admin_root = reverse("admin:index")
        if not request.path.startswith(admin_root) or not getattr(request.user, "is_authenticated", False):
            return None
        try:
            changes = control_changes_propose(proposer=request.user, gated=exception.gated)
        except DomainError as error:
            messages.error(request, error.message)
            return HttpResponseRedirect(request.get_full_path())
        for change in changes:
            messages.warning(request, _("Proposed; needs a second administrator: %(change)s") % {
                "change": change.summary})
        messages.info(request, _("Nothing else of that form was saved; save other changes again without the "
                                 "proposed part"))
        return HttpResponseRedirect(reverse("admin:controlplane_pendingcontrolchange_changelist"))
