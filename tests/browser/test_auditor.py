"""The auditor in Chromium: signs in and lands on the trail, finds every row of an order by its
id, follows a row to its run, exports CSV and JSON Lines (real downloads) that the offline
verifier accepts and that it refuses once a line is edited, presses Verify and reads the head
hash; the page at 390 px without horizontal scrolling; axe finds nothing serious.

Screenshots: test-artifacts/browser/<test>--auditor--*.png.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD, order_id
from audit.models import AuditChainHead, AuditEvent
from tests.browser.conftest import PHONE, playwright_expect
from tests.browser.test_newcomers import _axe, _no_horizontal_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
CANCEL = order_id("acme", "0005")


@pytest.fixture
def story(people):
    requester = people["acme"]["requester"]
    first = services.chat_send(user=requester, message=f"Please cancel order {CANCEL} because the customer changed their mind")
    services.chat_send(user=requester, message="I confirm", conversation_id=first.run.conversation_id,
                       confirmation_token=first.pending[0].token)
    services.chat_send(user=requester, message="How many SKU-10001 are in WH-HZ-01?")
    return first.run


def _verify_file(path: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "audit.verify_export", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_the_auditor_searches_exports_and_verifies(open_person, people, story, tmp_path):
    expect = playwright_expect()
    auditor = open_person("auditor", accept_downloads=True)
    auditor.sign_in("acme-auditor", DEMO_PASSWORD)
    page = auditor.page
    expect(page).to_have_url(f"{auditor.base_url}/audit/")
    expect(page.locator("[data-testid=nav-audit]")).to_have_class("active")

    # search by the order id: every row about that order, nothing else
    about = AuditEvent.objects.filter(tenant=people["acme"]["auditor"].tenant, business_object=CANCEL).count()
    assert about >= 3
    page.fill("[data-testid=search]", CANCEL)
    page.click("[data-testid=apply]")
    expect(page.locator("[data-testid=audit-row]")).to_have_count(about)
    expect(page.locator("[data-testid=audit-row]").first).to_contain_text("UTC")
    expect(page.locator("[data-testid=audit-row]", has_text="Cancel an order").first).to_be_visible()
    auditor.shot("search")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1360, f"{width} px at 1360"

    # a filter by outcome narrows the search to what ran
    page.select_option("select[name=outcome]", "done")
    page.click("[data-testid=apply]")
    expect(page.locator("[data-testid=audit-row]")).to_have_count(1)
    expect(page.locator("[data-testid=audit-row]")).to_contain_text("Ran")

    # the row's run link opens the read-only run page
    page.locator("[data-testid=audit-row] a", has_text="Run").first.click()
    expect(page.locator("[data-testid=run-status]")).to_be_visible()
    expect(page.locator("[data-testid=owner]")).to_have_text("acme-requester")
    page.go_back()

    # the whole chain: set-up changes shown, no other filter
    page.goto(f"{auditor.base_url}/audit/?setup=on")
    for kind in ("csv", "jsonl"):
        with page.expect_download() as info:
            page.click(f"[data-testid=export-{kind}]")
        path = tmp_path / f"audit.{kind}"
        info.value.save_as(path)
        code, out = _verify_file(path)
        head = AuditChainHead.objects.get(tenant__slug="acme")
        assert code == 0 and f"OK: {head.seq} rows, head {head.hash}" in out, out
        # one edited line is named
        lines = path.read_text(encoding="utf-8").split("\n")
        target = next(i for i, line in enumerate(lines) if CANCEL in line and "EXECUTED" in line)
        lines[target] = lines[target].replace("EXECUTED", "FAILED", 1)
        path.write_text("\n".join(lines), encoding="utf-8")
        code, out = _verify_file(path)
        assert code == 1 and "does not match its hash" in out, out

    # Verify on the platform: progress, then the head hash
    page.click("[data-testid=verify]")
    status = page.locator("[data-testid=verify-status]")
    expect(status).to_contain_text("The chain holds", timeout=30_000)
    head = AuditChainHead.objects.get(tenant__slug="acme")
    expect(status).to_contain_text(head.hash)
    assert page.evaluate("document.querySelector('[data-testid=verify-progress]').value") == head.seq
    auditor.shot("verified")

    problems = _axe(auditor, "audit")
    page.goto(f"{auditor.base_url}/audit/runs/{story.pk}/")
    problems += _axe(auditor, "audit-run")
    page.goto(f"{auditor.base_url}/audit/conversations/{story.conversation_id}/")
    problems += _axe(auditor, "audit-conversation")
    assert not problems, "\n".join(problems)
    assert not auditor.console_errors, auditor.console_errors


def test_the_audit_pages_fit_a_phone(open_person, people, story):
    expect = playwright_expect()
    phone = open_person("auditor-phone", **PHONE)
    phone.sign_in("acme-auditor", DEMO_PASSWORD)
    for path in ("/audit/?setup=on", f"/audit/?q={CANCEL}", f"/audit/runs/{story.pk}/",
                 f"/audit/conversations/{story.conversation_id}/"):
        phone.goto(path)
        expect(phone.page.locator("h1")).to_be_visible()
        _no_horizontal_scroll(phone)
    phone.goto("/audit/")
    phone.page.click("[data-testid=verify]")
    expect(phone.page.locator("[data-testid=verify-status]")).to_contain_text("The chain holds", timeout=30_000)
    _no_horizontal_scroll(phone)
    phone.shot("phone")
