"""A tenant administrator against the kill switch: a stop a platform operator engaged for their
tenant is the operator's to lift, by tool or by id; the administrator's own stop stays theirs."""
from __future__ import annotations

import pytest

from core.errors import NotFoundError, PermissionDeniedError
from policies.kill_switch import active_stop, kill_switch_engage, kill_switch_release, kill_switch_release_tool
from tests.policies.support import call
from tests.tools.support import REFUND_ORDER

pytestmark = pytest.mark.django_db
REFUND = {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"}


def test_a_tenant_admin_cannot_release_an_operators_stop_of_their_tenant(requester, acme_admin, operator):
    stop = kill_switch_engage(tool_name="refund_order", actor=operator, reason="fraud wave in this tenant",
                              tenant_id=requester.tenant_id).stop

    with pytest.raises(PermissionDeniedError):
        kill_switch_release_tool(tool_name="refund_order", actor=acme_admin, reason="we are fine")
    with pytest.raises(PermissionDeniedError):
        kill_switch_release(stop_id=stop.pk, actor=acme_admin, reason="we are fine")

    assert active_stop(requester.tenant_id, "refund_order") is not None
    assert call(requester, "refund_order", REFUND).result.code == "TOOL_STOPPED"
    kill_switch_release(stop_id=stop.pk, actor=operator, reason="cleared")
    assert active_stop(requester.tenant_id, "refund_order") is None


def test_an_operators_stop_stays_the_operators_after_they_are_deactivated(requester, acme_admin, operator):
    stop = kill_switch_engage(tool_name="refund_order", actor=operator, reason="fraud wave",
                              tenant_id=requester.tenant_id).stop
    operator.is_active = False
    operator.save(update_fields=["is_active"])
    with pytest.raises(PermissionDeniedError):
        kill_switch_release(stop_id=stop.pk, actor=acme_admin, reason="nobody is watching")


def test_a_tenant_admins_own_stop_is_still_theirs_and_another_tenants_is_not_found(requester, acme_admin,
                                                                                  globex_admin):
    stop = kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="double payments").stop
    with pytest.raises(NotFoundError):
        kill_switch_release(stop_id=stop.pk, actor=globex_admin, reason="not mine")
    with pytest.raises(NotFoundError):
        kill_switch_release_tool(tool_name="refund_order", actor=globex_admin, reason="x",
                                 tenant_id=requester.tenant_id)
    kill_switch_release(stop_id=stop.pk, actor=acme_admin, reason="fixed")
    assert active_stop(requester.tenant_id, "refund_order") is None
