"""Who may open the auditor's pages: auditors of a tenant (agentplatform.tenancy.roles.is_auditor),
only for their own tenant. Anyone else signed in gets 404, as for another tenant's object: the
pages do not say that they exist."""
from __future__ import annotations

from functools import wraps
from typing import Callable

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse

from agentplatform.tenancy.roles import is_auditor


def auditor_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap `view`: anonymous -> sign-in page; signed in but not an auditor -> Http404."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not is_auditor(request.user):
            raise Http404("no such page")
        return view(request, *args, **kwargs)

    return wrapped
