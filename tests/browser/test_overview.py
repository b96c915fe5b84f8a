"""The approval overview in Chromium: its SVG charts draw the numbers the database holds (as bar
values, as text above the bars and in the table), the quality table names the approvers, and the
page fits a 390 px phone and passes axe (no serious or critical violation).

Screenshots: test-artifacts/browser/overview-desktop.png, overview-phone.png.
"""
from __future__ import annotations

import datetime

import pytest

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.charts import BOTTOM, HEIGHT, TOP
from approvals.models import Approval, ConfirmationRequest
from core import clock
from tests.approvals.quality_support import Status, decide, gated_request, view
from tests.browser.conftest import PHONE, named_shot, playwright_expect
from tests.browser.test_newcomers import _axe, _no_horizontal_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
DAY = datetime.timedelta(days=1)


def _story(requester, approver1, approver2) -> None:
    """Requests over the last days: approved, rejected, expired (one unseen) and still waiting."""
    today = datetime.datetime.combine(clock.now().date(), datetime.time(), datetime.timezone.utc)
    for days_ago, hour in ((3, 9), (3, 10), (1, 8)):
        created = today - days_ago * DAY + datetime.timedelta(hours=hour)
        row = gated_request(requester, created=created, status=Status.CONSUMED,
                            confirmed=created + datetime.timedelta(minutes=3),
                            decided=created + datetime.timedelta(minutes=3))
        view(row, approver1, seconds=60)
        decide(row, approver1, Approval.Decision.APPROVE, seconds=180)
    created = today - 2 * DAY + datetime.timedelta(hours=9)
    rejected = gated_request(requester, created=created, status=Status.CANCELLED,
                             decided=created + datetime.timedelta(seconds=4))
    decide(rejected, approver2, Approval.Decision.REJECT, seconds=4)  # unopened, in 4 s
    for hours in (2, 5):
        created = today - 2 * DAY + datetime.timedelta(hours=hours)
        gated_request(requester, created=created, status=Status.EXPIRED, expires=created + datetime.timedelta(hours=1),
                      decided=created + datetime.timedelta(hours=1))
    waiting = gated_request(requester, created=clock.now() - datetime.timedelta(minutes=30),
                            expires=clock.now() + datetime.timedelta(hours=2))
    view(waiting, approver2, seconds=10)


def _expected(tenant_id: int) -> dict[str, dict[str, int]]:
    """The oracle: {series: {day: count}} computed row by row here, independently of the page's
    aggregate SQL."""
    now = clock.now()
    rows = list(ConfirmationRequest.objects.filter(tenant_id=tenant_id, policy="APPROVERS"))
    days = [(now - i * DAY).date() for i in range(29, -1, -1)]
    out = {"waiting": {}, "approved": {}, "rejected": {}, "expired": {}}
    for day in days:
        end = min(datetime.datetime.combine(day + DAY, datetime.time(), datetime.timezone.utc), now)
        left = [min(r.confirmed_at or r.decided_at or r.expires_at, r.expires_at) for r in rows]
        out["waiting"][day.isoformat()] = sum(1 for r, gone in zip(rows, left) if r.created_at < end <= gone)
        out["approved"][day.isoformat()] = sum(1 for r in rows if r.confirmed_at and r.confirmed_at.date() == day)
        out["rejected"][day.isoformat()] = Approval.objects.filter(
            request__tenant_id=tenant_id, decision="REJECT", created_at__date=day).count()
        out["expired"][day.isoformat()] = sum(1 for r in rows if r.status == "EXPIRED" and r.expires_at.date() == day)
    return out


def test_the_overview_charts_draw_the_database_numbers(open_person, requester, approver1, approver2, acme_admin):
    expect = playwright_expect()
    _story(requester, approver1, approver2)
    expected = _expected(requester.tenant_id)
    assert sum(expected["approved"].values()) == 3 and sum(expected["expired"].values()) == 2  # the story holds

    admin = open_person("admin")
    admin.sign_in(acme_admin.username, DEMO_PASSWORD)
    admin.page.click("[data-testid=nav-overview]")
    expect(admin.page.locator("h1")).to_contain_text("Approval overview")

    for key, by_day in expected.items():
        chart = admin.page.locator(f"[data-testid=chart-{key}]")
        expect(chart.locator("svg title").first).to_have_text(
            {"waiting": "Waiting at the end of each day / 每日结束时待审批", "approved": "Approved per day / 每日批准",
             "rejected": "Rejected per day / 每日拒绝", "expired": "Expired per day / 每日过期"}[key])
        drawn = {g.get_attribute("data-day"): int(g.get_attribute("data-value"))
                 for g in chart.locator("[data-testid=bar]").all()}
        assert drawn == by_day, key
        # the numbers are text on the chart: one label per non-zero bar, and taller bars for more
        labels = {g.get_attribute("data-day"): g.locator("[data-testid=bar-value]").text_content()
                  for g in chart.locator("[data-testid=bar]").all() if g.locator("[data-testid=bar-value]").count()}
        assert labels == {day: str(n) for day, n in by_day.items() if n}, key
        heights = {g.get_attribute("data-day"): float(g.locator("rect").get_attribute("height"))
                   for g in chart.locator("[data-testid=bar]").all()}
        top = max(by_day.values())
        for day, n in by_day.items():
            assert heights[day] == pytest.approx((HEIGHT - TOP - BOTTOM) * n / max(top, 1), abs=0.02), (key, day)
    # the same numbers in the table behind the charts
    admin.page.click(".ov-numbers summary")
    today = clock.now().date().isoformat()
    row = admin.page.locator("[data-testid=series-table] tbody tr", has_text=today)
    expect(row.locator("td").first).to_have_text(str(expected["waiting"][today]))
    # the quality table: approver1 three approvals, approver2 one rejection without opening it
    expect(admin.page.locator(f"[data-testid=approver-row][data-key='{approver1.pk}'] [data-testid=decisions]")).to_have_text("3")
    second = admin.page.locator(f"[data-testid=approver-row][data-key='{approver2.pk}']")
    expect(second.locator("[data-testid=unviewed]")).to_contain_text("1 (100%)")
    expect(admin.page.locator("[data-testid=total-expired-unseen]")).to_contain_text("2")
    _no_horizontal_scroll(admin)  # 1360 px
    named_shot(admin, "overview-desktop.png")
    problems = _axe(admin, "overview")
    assert not problems, "\n".join(problems)
    assert not admin.console_errors


def test_the_overview_fits_a_phone(open_person, requester, approver1, approver2, acme_admin):
    _story(requester, approver1, approver2)
    phone = open_person("admin-phone", **PHONE)
    phone.sign_in(acme_admin.username, DEMO_PASSWORD)
    phone.goto("/approvals/overview/?days=7")
    playwright_expect()(phone.page.locator("[data-testid=chart-approved] svg")).to_be_visible()
    phone.page.click(".ov-numbers summary")
    _no_horizontal_scroll(phone)
    box = phone.page.locator("[data-testid=chart-approved] svg").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    named_shot(phone, "overview-phone.png")
    problems = _axe(phone, "overview-phone")
    assert not problems, "\n".join(problems)
