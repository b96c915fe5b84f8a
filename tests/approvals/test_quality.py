"""Approval quality numbers (approvals.quality, approvals.quality_series) against rows with known
times, on whichever database the run uses (PostgreSQL's percentile_cont, SQLite's fallback)."""
from __future__ import annotations

import datetime

import pytest

from approvals.models import Approval
from approvals.quality import decision_stats, expired_unseen
from approvals.quality_series import daily_counts
from approvals.quality_window import window_last_days
from tests.approvals.quality_support import Status, at, decide, gated_request, view

NOW = at("2026-11-20 12:00")
H = datetime.timedelta(hours=1)
APPROVE, REJECT, EDIT = Approval.Decision.APPROVE, Approval.Decision.REJECT, Approval.Decision.EDIT


@pytest.fixture
def decisions(requester, approver1, approver2, outsider, outsider_approver):
    """acme: approver1 decides four refunds (times 15, 40, 130 and 1000 s; one unviewed, one
    fast), approver2 edits a cancellation and approves a refund, both unviewed by them; a decision
    out of the window and one of globex must not count."""
    r1 = gated_request(requester, created=NOW - 2 * H)
    view(r1, approver1, seconds=100)
    decide(r1, approver1, APPROVE, seconds=130)  # read for 30 s
    r2 = gated_request(requester, created=NOW - 3 * H)
    decide(r2, approver1, APPROVE, seconds=40)  # never opened
    r3 = gated_request(requester, created=NOW - 1 * H)
    view(r3, approver1, seconds=10)
    view(r3, approver1, seconds=14)  # the first view is the one that counts
    decide(r3, approver1, APPROVE, seconds=15)  # 5 s after opening: fast
    r4 = gated_request(requester, created=NOW - 5 * H)
    view(r4, approver1, seconds=100)
    decide(r4, approver1, REJECT, seconds=1000)
    r5 = gated_request(requester, created=NOW - 24 * H, tool="cancel_order")
    view(r5, approver1, seconds=5)  # someone else's view is not approver2's
    decide(r5, approver2, EDIT, seconds=60)
    r6 = gated_request(requester, created=NOW - 48 * H)
    decide(r6, approver2, APPROVE, seconds=20)
    view(r6, approver2, seconds=30)  # opened after deciding: still unviewed at the decision
    old = gated_request(requester, created=NOW - 40 * 24 * H)
    decide(old, approver1, APPROVE, seconds=10)
    theirs = gated_request(outsider, created=NOW - 2 * H)
    decide(theirs, outsider_approver, APPROVE, seconds=1)


def _by_key(rows):
    return {row.key: row for row in rows}


def test_per_approver_times_rates_unviewed_and_fast(decisions, approver1, approver2, requester):
    window = window_last_days(30, now=NOW)

    rows = _by_key(decision_stats(tenant_id=requester.tenant_id, window=window, by="approver"))

    assert set(rows) == {approver1.pk, approver2.pk}
    first = rows[approver1.pk]
    assert (first.decisions, first.approve, first.reject, first.edit, first.respond) == (4, 3, 1, 0, 0)
    assert (first.unviewed, first.fast) == (1, 1)
    # [15, 40, 130, 1000]: median (40 + 130) / 2; p90 at position 2.7: 130 + 0.7 * 870
    assert first.median_seconds == pytest.approx(85.0, abs=0.01)
    assert first.p90_seconds == pytest.approx(739.0, abs=0.01)
    second = rows[approver2.pk]
    assert (second.decisions, second.approve, second.edit, second.unviewed, second.fast) == (2, 1, 1, 2, 0)
    assert second.median_seconds == pytest.approx(40.0, abs=0.01)  # [20, 60]
    assert second.p90_seconds == pytest.approx(56.0, abs=0.01)
    assert first.rate(first.approve) == 0.75 and second.rate(second.hasty) == 1.0


def test_per_tool_and_for_all(decisions, requester):
    window = window_last_days(30, now=NOW)

    tools = _by_key(decision_stats(tenant_id=requester.tenant_id, window=window, by="tool"))
    [everything] = decision_stats(tenant_id=requester.tenant_id, window=window, by="all")

    assert {k: (r.decisions, r.unviewed, r.fast) for k, r in tools.items()} == {
        "refund_order": (5, 2, 1), "cancel_order": (1, 1, 0)}
    assert tools["refund_order"].median_seconds == pytest.approx(40.0, abs=0.01)  # [15, 20, 40, 130, 1000]
    assert (everything.decisions, everything.approve, everything.reject, everything.edit) == (6, 4, 1, 1)
    assert everything.median_seconds == pytest.approx(50.0, abs=0.01)  # [15, 20, 40, 60, 130, 1000]


def test_the_threshold_is_the_setting(decisions, requester, settings):
    window = window_last_days(30, now=NOW)
    settings.APPROVAL_FAST_DECISION_SECONDS = 31  # now the 30 s read counts as fast too
    [everything] = decision_stats(tenant_id=requester.tenant_id, window=window, by="all")
    assert everything.fast == 2


def test_a_shorter_window_leaves_older_decisions_out(decisions, requester):
    [today] = decision_stats(tenant_id=requester.tenant_id, window=window_last_days(1, now=NOW), by="all")
    assert today.decisions == 4  # r5 and r6 were decided one and two days earlier


def test_no_decisions_no_rows(requester, outsider):
    assert decision_stats(tenant_id=requester.tenant_id, window=window_last_days(7, now=NOW), by="all") == []


def test_expired_unseen_counts_requests_nobody_opened(requester, approver1):
    gated_request(requester, created=NOW - 30 * H, status=Status.EXPIRED, expires=NOW - 29 * H)  # unseen
    seen = gated_request(requester, created=NOW - 30 * H, status=Status.EXPIRED, expires=NOW - 29 * H)
    view(seen, approver1, seconds=60)
    gated_request(requester, created=NOW - 2 * H, expires=NOW - 60 * datetime.timedelta(seconds=1))  # due, unswept
    gated_request(requester, created=NOW - 1 * H, expires=NOW + H)  # still open
    gated_request(requester, created=NOW - 30 * H, tool="cancel_order", status=Status.EXPIRED, expires=NOW - 29 * H,
                  policy="REQUESTER")  # the requester's own confirmation: not an approval

    rows = expired_unseen(tenant_id=requester.tenant_id, window=window_last_days(30, now=NOW), now=NOW)

    assert rows == [{"tool_name": "refund_order", "expired": 3, "unseen": 2}]


def test_daily_counts_waiting_approved_rejected_expired(requester, approver1):
    # a window of three days: 11-18, 11-19 and 11-20 until noon
    gated_request(requester, created=at("2026-11-17 09:00"), expires=at("2026-11-21 09:00"))  # waits throughout
    gated_request(requester, created=at("2026-11-18 10:00"), status=Status.CONSUMED,
                  confirmed=at("2026-11-18 10:05"), decided=at("2026-11-18 10:05"))
    rejected = gated_request(requester, created=at("2026-11-18 11:00"), status=Status.CANCELLED,
                             decided=at("2026-11-19 09:00"), expires=at("2026-11-19 11:00"))
    decide(rejected, approver1, REJECT, seconds=22 * 3600)
    gated_request(requester, created=at("2026-11-19 08:00"), status=Status.EXPIRED, expires=at("2026-11-19 09:00"),
                  decided=at("2026-11-19 09:05"))  # swept five minutes late: it left at its deadline
    gated_request(requester, created=at("2026-11-20 00:30"), expires=at("2026-11-21 00:30"))

    days = daily_counts(tenant_id=requester.tenant_id, window=window_last_days(3, now=NOW), now=NOW)

    assert [(d.day.isoformat(), d.waiting, d.approved, d.rejected, d.expired) for d in days] == [
        ("2026-11-18", 2, 1, 0, 0),
        ("2026-11-19", 1, 0, 1, 1),
        ("2026-11-20", 2, 0, 0, 0),
    ]


def test_a_window_is_whole_utc_days_up_to_now():
    window = window_last_days(7, now=NOW)
    assert window.since == at("2026-11-14 00:00") and window.until == NOW
    assert len(window.days) == 7 and window.days[-1] == NOW.date()
    with pytest.raises(ValueError):
        window_last_days(0)
