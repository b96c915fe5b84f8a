"""A list's statements do not depend on how many rows its page shows: eligibility, quorum
shortfalls and decisions are read once per page (independence.shared_standing, the prefetched
decisions), never once per row. Each page is counted with 2 decided and 2 waiting requests, then
with 10 and 9 (still one page of every list: a second page adds its count); the counts must be
equal."""
from __future__ import annotations

from tests.approvals.list_support import history_build
from tests.approvals.test_list_plans import _statements


def test_no_list_reads_once_per_row(db, people):
    people = people["acme"]
    approvers = [people["approver1"], people["approver2"]]
    requester = people["requester"]
    history_build(requester=requester, approvers=approvers, decided=2, waiting=2, start=0)
    few = _statements(people)
    history_build(requester=requester, approvers=approvers, decided=8, waiting=7, start=100)
    full = _statements(people)
    assert full == few
