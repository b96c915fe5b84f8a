"""Who may read or cancel a run: only the person who started it.

An approver, a member or an approver of another tenant, another tenant's administrator, a platform
operator and another tenant's staff all get 404 for the run, its cancel endpoint and its events;
the run stays waiting."""
from rest_framework.test import APIClient
from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from agentplatform.tenancy.models import User
from tests.tools.support import ORDER


def _api(u):
    c = APIClient(); c.force_authenticate(u); return c


def test_who_may_cancel_or_read(requester, approver1, outsider, outsider_approver, people):
    out = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    url = f"/api/v1/runs/{out.run.pk}/"
    globex_admin = people["globex"]["admin"]
    op = User.objects.create(username="op", is_superuser=True, is_staff=True)
    staff_other = User.objects.create(username="gstaff", is_staff=True, tenant=outsider.tenant)
    for u in (approver1, outsider, outsider_approver, globex_admin, op, staff_other):
        g = _api(u).get(url); c = _api(u).post(url + "cancel/", {}, format="json")
        e = _api(u).get(url + "events/")
        print(u.username, "GET", g.status_code, "cancel", c.status_code, c.json(), "events", e.status_code)
        assert g.status_code == 404 and c.status_code == 404 and e.status_code == 404
    assert Run.objects.get(pk=out.run.pk).status == "AWAITING_CONFIRMATION"
