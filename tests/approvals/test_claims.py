"""An approver's claim on a request: who may take it, that it never blocks a decision, that it
lapses and is released on a decision, and that two approvers claiming at the same moment on
PostgreSQL end with one claim both of them read."""
from __future__ import annotations

import datetime

import pytest

from agentplatform.runtime import services
from agentplatform.tenancy.models import User
from approvals import approver_actions, claims
from approvals.errors import ApprovalForbidden, ConfirmationNotFound
from approvals.models import ConfirmationRequest, RequestClaim, RequestView
from core import clock
from tests.tools.support import race


@pytest.fixture
def refund_request(requester) -> ConfirmationRequest:
    """A PENDING approver-gated refund (quorum 2) asked by acme's requester."""
    outcome = services.chat_send(user=requester, message="Refund A202607290003 amount 50 because it arrived broken")
    assert outcome.pending and outcome.pending[0].needs == "approvers"
    return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)


def test_an_approver_claims_and_another_sees_it_but_still_decides(db, approver1, approver2, refund_request):
    mine = claims.claim_take(request_id=refund_request.pk, user=approver1)
    assert mine.mine and mine.user.pk == approver1.pk
    assert mine.expires_at - mine.claimed_at == datetime.timedelta(seconds=300)

    theirs = claims.claim_take(request_id=refund_request.pk, user=approver2)  # a live claim stays approver1's
    assert not theirs.mine and theirs.user.pk == approver1.pk and theirs.expires_at == mine.expires_at

    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver2)  # never blocked
    claims.claim_release_on_decision(request_id=refund_request.pk, user=approver2)
    assert RequestClaim.objects.get().user_id == approver1.pk  # approver1 is still looking

    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver1)
    claims.claim_release_on_decision(request_id=refund_request.pk, user=approver1)
    assert not RequestClaim.objects.exists()


def test_a_lapsed_claim_is_taken_over_and_one_on_an_ended_request_reads_as_released(
        db, approver1, approver2, refund_request, settings):
    settings.APPROVAL_CLAIM_SECONDS = 60
    first = claims.claim_take(request_id=refund_request.pk, user=approver1)
    RequestClaim.objects.update(expires_at=clock.now() - datetime.timedelta(seconds=1))
    assert claims.claim_of(request_id=refund_request.pk, user=approver2).user is None

    taken = claims.claim_take(request_id=refund_request.pk, user=approver2)
    assert taken.mine and taken.claimed_at > first.claimed_at
    assert taken.expires_at - taken.claimed_at == datetime.timedelta(seconds=60)

    # the request ends some other way (withdrawn, expired): the row may stay, nobody reads it
    ConfirmationRequest.objects.filter(pk=refund_request.pk).update(status=ConfirmationRequest.Status.WITHDRAWN)
    assert claims.claims_on(request_ids=[refund_request.pk], tenant_id=refund_request.tenant_id) == {}


def test_renewing_my_claim_keeps_when_i_started(db, approver1, refund_request):
    first = claims.claim_take(request_id=refund_request.pk, user=approver1)
    again = claims.claim_take(request_id=refund_request.pk, user=approver1)
    assert again.claimed_at == first.claimed_at and again.expires_at >= first.expires_at
    assert RequestClaim.objects.count() == 1


def test_only_someone_who_may_decide_it_claims_it(db, approver1, approver2, requester, nobody, outsider_approver,
                                                 refund_request):
    for user in (requester, nobody, outsider_approver):  # their own; no approve_tool; another tenant
        with pytest.raises(ConfirmationNotFound):
            claims.claim_take(request_id=refund_request.pk, user=user)
    approver_actions.confirmation_approve(request_id=refund_request.pk, approver=approver1)
    with pytest.raises(ApprovalForbidden):  # already decided it: nothing left for them to decide
        claims.claim_take(request_id=refund_request.pk, user=approver1)
    approver_actions.confirmation_reject(request_id=refund_request.pk, approver=approver2, reason="no")
    with pytest.raises(claims.ClaimNotOpen):
        claims.claim_take(request_id=refund_request.pk, user=approver2)
    assert not RequestClaim.objects.exists()


def test_releasing_drops_only_my_own_claim(db, approver1, approver2, refund_request):
    claims.claim_take(request_id=refund_request.pk, user=approver1)
    assert claims.claim_release(request_id=refund_request.pk, user=approver2).user.pk == approver1.pk
    assert claims.claim_release(request_id=refund_request.pk, user=approver1).user is None
    assert not RequestClaim.objects.exists()


def test_a_view_is_one_row(db, approver1, refund_request, django_assert_num_queries):
    with django_assert_num_queries(1):
        claims.view_record(request=refund_request, user=approver1)
    view = RequestView.objects.get()
    assert (view.request_id, view.user_id, view.tenant_id) == (refund_request.pk, approver1.pk,
                                                              refund_request.tenant_id)


@pytest.mark.postgres
def test_two_approvers_claiming_at_the_same_moment_get_one_claimer(transactional_db, approver1, approver2,
                                                                   refund_request):
    # Several rounds, each with both approvers lined up on a barrier and the claim row absent.
    for _ in range(8):
        RequestClaim.objects.all().delete()

        def prepare(index: int) -> User:
            return User.objects.get(pk=(approver1.pk, approver2.pk)[index])

        results = race(2, prepare, lambda user: claims.claim_take(request_id=refund_request.pk, user=user))
        assert not [r for r in results if isinstance(r, BaseException)], results
        holders = {r.user.pk for r in results}
        assert len(holders) == 1 and holders <= {approver1.pk, approver2.pk}
        assert [r.mine for r in results].count(True) == 1
        assert list(RequestClaim.objects.values_list("user_id", flat=True)) == list(holders)
