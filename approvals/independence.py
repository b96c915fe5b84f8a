"""Who counts toward a request's quorum: independent approvers (docs/approvals.md, "Eligibility").

A decision counts only from an approver who is not the requester, is not a service account, and
whose `approve_tool` standing on the tool neither came from the requester (as proposer or approver
of the control change that gave it) nor began after the request was created. Where standing comes
from (its provenance) is recorded by the control plane, which sits on top of every app:
approvals never imports it, and the control plane installs its assessor here at start-up
(`register_assessor`, the pattern of `approvals.amendments.register_rebinder`). Without one, only
the rules this module knows by itself apply (requester, service account).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.db.models import Q

# Stable codes of why an approver does not count (the API's `ineligible[].code`).
REQUESTER = "REQUESTER"
SERVICE_ACCOUNT = "SERVICE_ACCOUNT"
NOT_MEMBER = "NOT_MEMBER"
NO_STANDING = "NO_STANDING"
GRANTED_BY_REQUESTER = "GRANTED_BY_REQUESTER"
GRANTED_AFTER_REQUEST = "GRANTED_AFTER_REQUEST"
KEY_HOLDER = "KEY_HOLDER"

REASONS = {
    REQUESTER: "the requester never approves their own call / 申请人不能批准自己的调用",
    SERVICE_ACCOUNT: "a service account never counts toward a quorum / 服务账号不计入法定人数",
    NOT_MEMBER: "not an active member of the request's tenant / 不是该租户的在职成员",
    NO_STANDING: "does not hold approve_tool on this tool / 未持有该工具的 approve_tool",
    GRANTED_BY_REQUESTER: ("their approve_tool standing was proposed or approved by the requester "
                           "/ 其审批资格由申请人提议或批准"),
    GRANTED_AFTER_REQUEST: ("their approve_tool standing began after the request was created "
                            "/ 其审批资格在申请创建之后才生效"),
    KEY_HOLDER: ("the request was made by a service account whose key they administer or received: they "
                 "may have asked for it themselves / 申请来自其可持有密钥的服务账号，视同申请人"),
}


@dataclass(frozen=True)
class Eligibility:
    """Whether one user's decision counts toward one request. code: "" when eligible, else one of
    the codes above; reason: a bilingual sentence saying why not ("" when eligible)."""

    eligible: bool
    code: str = ""
    reason: str = ""


ELIGIBLE = Eligibility(True)


def ineligible(code: str) -> Eligibility:
    """An Eligibility refusing for `code`, with its bilingual reason."""
    return Eligibility(False, code, REASONS.get(code, code))


class Assessor(Protocol):
    """What the control plane provides (agentplatform.controlplane.standing)."""

    def assess(self, *, user: Any, request: Any) -> Eligibility:
        """The standing of `user` (active member of the request's tenant, not its requester) on
        `request`'s tool, judged against the request's requester and creation time."""

    def decidable(self, *, user: Any) -> Q:
        """A filter on ConfirmationRequest keeping only the requests `user`'s standing makes them
        independent for (tool, creation time, requester)."""


_assessor: Assessor | None = None


def register_assessor(assessor: Assessor | None) -> None:
    """Install (or, with None, remove) the provenance-aware assessor. Called once by
    agentplatform.controlplane's AppConfig.ready."""
    global _assessor
    _assessor = assessor


# -- one page, many requests: standing read once -------------------------------------------------

_SHARED: ContextVar[dict | None] = ContextVar("independence_shared", default=None)
_T = TypeVar("_T")


@contextmanager
def shared_standing() -> Iterator[None]:
    """Within this block, what eligibility reads about people and tools (who holds approve_tool
    on a tool, where a user's standing on it comes from, a requester and the holders of its key)
    is read once and reused for every request judged: a page of 25 requests on the same few tools
    asks the database a few times instead of 25 times each. For pages and lists that show
    eligibility or a quorum shortfall only; never around a decision (approver_actions judges
    with fresh reads, outside any such block). Nothing is kept after the block."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared(key: tuple, compute: Callable[[], _T]) -> _T:
    """`compute()`, or inside `shared_standing()` the value an earlier call with the same `key`
    computed in the block. key: a tuple naming what is read and for whom (hashable)."""
    memo = _SHARED.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def is_service_account(user: Any) -> bool:
    """True for a non-human account (a User flag `is_service_account` where that field exists)."""
    return bool(getattr(user, "is_service_account", False))


def assess(*, user: Any, request: Any) -> Eligibility:
    """Whether a decision of `user` on `request` (a ConfirmationRequest with `user_id`, `tenant_id`,
    `tool_id` and `created_at`) counts toward its quorum now. Returns an Eligibility; reads the
    provenance of the user's standing (a few queries). Raises nothing."""
    if user.pk == request.user_id:
        return ineligible(REQUESTER)
    if is_service_account(user):
        return ineligible(SERVICE_ACCOUNT)
    if not user.is_active or user.tenant_id != request.tenant_id:
        return ineligible(NOT_MEMBER)
    if _assessor is None:
        return ELIGIBLE
    return _assessor.assess(user=user, request=request)


def decidable_filter(*, user: Any) -> Q | None:
    """A Q on ConfirmationRequest that keeps only the requests for which `user` is an independent
    approver (None: no assessor installed, nothing to add). The caller still applies tenant,
    status, tool and requester rules."""
    if is_service_account(user):
        return Q(pk__in=[])
    if _assessor is None:
        return None
    return _assessor.decidable(user=user)
