"""`manage.py demo` leaves fresh orders to try, keeps what administrators
changed on a second run (and says so), resets it only with `--reset` (and says so), and cuts its
event lines at word boundaries."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from guardian.shortcuts import remove_perm

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import TRY_ORDERS, demo_changes, order_id
from agentplatform.runtime.demo.suggestions import suggestions
from agentplatform.runtime.management.commands.demo import clip
from agentplatform.runtime.models import Run
from tools.catalog.models import Order
from tools.models import TenantToolPolicy, Tool

# The story's approvals resume their runs on commit: real transactions.
pytestmark = pytest.mark.django_db(transaction=True)


def _demo(*args: str) -> str:
    out = io.StringIO()
    call_command("demo", "--no-migrate", *args, stdout=out)
    return out.getvalue()


def _disable(tenant_slug: str, tool_name: str) -> None:
    """As an administrator does it in the admin: a saved whitelist entry (audited)."""
    policy = TenantToolPolicy.objects.get(tenant__slug=tenant_slug, tool__name=tool_name)
    policy.enabled = False
    policy.save()


def _enabled(tenant_slug: str, tool_name: str) -> bool:
    return TenantToolPolicy.objects.get(tenant__slug=tenant_slug, tool__name=tool_name).enabled


def test_the_demo_leaves_fresh_orders_that_the_suggestions_name():
    output = _demo()

    assert "The whole story held" in output
    tries = [order_id("acme", suffix) for suffix in TRY_ORDERS.values()]
    assert all(Order.objects.get(tenant__slug="acme", order_id=o).status == Order.Status.PAID for o in tries)
    assert all(o in output for o in tries)  # the closing lines say which orders to try
    chips = suggestions("acme")
    assert all(any(o in chip for chip in chips) for o in tries)
    # the first order-naming chip works after the demo: it asks the requester to confirm
    from agentplatform.tenancy.models import User

    requester = User.objects.get(username="acme-requester")
    cancel_chip = next(chip for chip in chips if chip.startswith("Cancel"))
    outcome = services.chat_send(user=requester, message=cancel_chip)
    assert outcome.run.status == Run.Status.AWAITING_CONFIRMATION and outcome.pending[0].token
    # the story ends over MCP: its HIGH call ran once, through /mcp/, as the requester's key
    from agentplatform.mcp_server.demo import KEY_NAME, MCP_ORDER
    from agentplatform.mcp_server.models import McpCall
    from tools.catalog.models import Cancellation

    assert "18. Any agent, governed" in output
    assert Cancellation.objects.filter(order__order_id=order_id("acme", MCP_ORDER)).count() == 1
    assert McpCall.objects.get(key_name=KEY_NAME, tool_name="cancel_order").status == McpCall.Status.COMPLETED


def test_a_second_demo_keeps_a_tool_an_admin_disabled_and_says_so():
    _demo()
    _disable("globex", "cancel_order")

    output = _demo()

    assert not _enabled("globex", "cancel_order")
    assert "Kept the changes made in the admin" in output and "cancel_order is disabled for globex" in output
    assert "--reset" in output
    assert "The whole story held" in output


def test_reset_restores_the_seeded_settings_and_says_so():
    _demo()
    # given: changes that break the story in acme
    _disable("acme", "cancel_order")
    from agentplatform.tenancy.models import User

    requester = User.objects.get(username="acme-requester")
    remove_perm("tools.use_tool", requester, Tool.objects.get(name="refund_order"))
    assert "cancel_order is disabled for acme" in demo_changes()

    # a plain second run keeps them, fails the story and points at --reset
    with pytest.raises(CommandError) as broken:
        _demo()
    assert "--reset" in str(broken.value)
    assert not _enabled("acme", "cancel_order")

    output = _demo("--reset")

    assert "--reset: the demo's tools, whitelist, overrides, grants and members are back as seeded" in output
    assert "The whole story held" in output
    assert _enabled("acme", "cancel_order")
    assert demo_changes() == []


def test_event_lines_are_cut_between_words():
    text = '{"answer": "The order A202607290001 was cancelled because the customer changed their mind"}'
    cut = clip(text, 60)
    assert len(cut) <= 60 and cut.endswith("…")
    assert text.startswith(cut[:-1]) and text[len(cut) - 1] in ' ,:'  # the next character starts a new word
    assert clip("short", 60) == "short"
    assert clip("x" * 100, 10) == "x" * 9 + "…"  # one long word: cut inside it
