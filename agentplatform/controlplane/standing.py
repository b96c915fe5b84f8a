"""Where an approver's standing comes from, and whether it makes them independent of a request
(approvals.independence; docs/approvals.md, "Eligibility").

A user holds `approve_tool` on a tool through paths: a direct grant (user, tool), or a group grant
(group, tool) plus their membership of that group. A path became effective at the latest of its
pieces (and of the account's last re-activation), and came from every person who proposed or
approved one of them (StandingSource). A piece without a record predates the record and counts
as held since the beginning, from nobody known. A decision of the user counts toward a request
when at least one path became effective before the request was created and none of its people
is the requester. A service account's requester is, for this, everyone who may hold its key
(`key_holders`): an administrator who asks through an integration never approves it.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Q
from guardian.models import GroupObjectPermission, UserObjectPermission

from agentplatform.controlplane.models import StandingSource
from agentplatform.tenancy.models import User
from audit.models import AuditEvent
from approvals import independence
from approvals.independence import Eligibility

APPROVE = "approve_tool"


@dataclass(frozen=True)
class Path:
    """One way a user holds approve_tool on one tool. since: when it became effective (None: before
    any record); people: ids of the users it came from (proposers and approvers); via: words."""

    tool_id: int
    since: datetime.datetime | None
    people: frozenset[int]
    via: str


def _later(a: datetime.datetime | None, b: datetime.datetime | None) -> datetime.datetime | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _piece(source: StandingSource | None) -> tuple[datetime.datetime | None, frozenset[int]]:
    if source is None:
        return None, frozenset()
    return source.effective_at, frozenset(p for p in (source.proposer_id, source.approver_id) if p)


def paths_of(user, *, tool_id: int | None = None) -> list[Path]:
    """Every path by which `user` holds approve_tool (on `tool_id` only, when given). A few queries."""
    direct = UserObjectPermission.objects.filter(user_id=user.pk, permission__codename=APPROVE,
                                                 permission__content_type__app_label="tools")
    via_groups = GroupObjectPermission.objects.filter(group__user=user.pk, permission__codename=APPROVE,
                                                      permission__content_type__app_label="tools")
    if tool_id is not None:
        direct, via_groups = direct.filter(object_pk=str(tool_id)), via_groups.filter(object_pk=str(tool_id))
    grants = [("user", None, int(pk)) for pk in direct.values_list("object_pk", flat=True)]
    grants += [("group", gid, int(pk)) for gid, pk in via_groups.values_list("group_id", "object_pk")]
    if not grants:
        return []
    sources = {s.key: s for s in StandingSource.objects.filter(Q(user_id=user.pk) | Q(
        group_id__in=[g for _, g, _ in grants if g is not None], kind=StandingSource.Kind.GROUP_GRANT))}
    activation = _piece(sources.get(f"ACTIVATION:{user.pk}::"))
    paths = []
    for how, group_id, tid in grants:
        if how == "user":
            pieces = [_piece(sources.get(f"USER_GRANT:{user.pk}::{tid}")), activation]
            via = "direct grant"
        else:
            pieces = [_piece(sources.get(f"GROUP_GRANT::{group_id}:{tid}")),
                      _piece(sources.get(f"MEMBERSHIP:{user.pk}:{group_id}:")), activation]
            via = f"group #{group_id}"
        since = None
        people: frozenset[int] = frozenset()
        for when, who in pieces:
            since, people = _later(since, when), people | who
        paths.append(Path(tool_id=tid, since=since, people=people, via=via))
    return paths


def _key_issues(**where) -> Q:
    """The CREATED rows of API keys in the trail (the control-plane receivers write one per key,
    naming its owner's username and, for a person acting, its issuer as the actor)."""
    return Q(decision=AuditEvent.Decision.CONTROL_CHANGE, status="CREATED",
             masked_arguments__object__type="api_token", **where)


def key_holders(requester: User) -> frozenset[int]:
    """People who may hold a key of `requester` when it is a service account (empty for a person):
    its tenant's administrators and the platform operators now (they may issue one at any time),
    and everyone the trail shows received one. A service account has no human owner: whoever holds
    its key can ask in its name, so for independence they are its requester."""
    if not requester.is_service_account:
        return frozenset()
    admins = User.objects.filter(Q(is_superuser=True) | Q(is_staff=True, tenant_id=requester.tenant_id))
    issuers = AuditEvent.objects.filter(_key_issues(tenant_id=requester.tenant_id,
                                                    masked_arguments__new__user=requester.username),
                                        actor_id__isnull=False)
    return frozenset(admins.values_list("pk", flat=True)) | frozenset(issuers.values_list("actor_id", flat=True))


def _service_accounts_keyed_by(user: User) -> Q:
    """A filter on ConfirmationRequest keeping the requests of service accounts `user` may hold a
    key of (see key_holders)."""
    if user.is_superuser or user.is_staff:
        return Q(user__is_service_account=True)
    names = AuditEvent.objects.filter(_key_issues(tenant_id=user.tenant_id), actor_id=user.pk) \
        .values_list("masked_arguments__new__user", flat=True)
    return Q(user__is_service_account=True, user__username__in=[n for n in names if n])


class ProvenanceAssessor:
    """The assessor approvals.independence calls (installed by the app's ready())."""

    def assess(self, *, user, request) -> Eligibility:
        """See approvals.independence.Assessor.assess."""
        # Read once per page inside independence.shared_standing(); a decision reads afresh.
        paths = independence.shared(("paths", user.pk, request.tool_id),
                                    lambda: paths_of(user, tool_id=request.tool_id))
        if not paths:
            return independence.ineligible(independence.NO_STANDING)
        requester = independence.shared(("user", request.user_id),
                                        lambda: User.objects.filter(pk=request.user_id).first())
        if requester is not None and user.pk in independence.shared(("key holders", requester.pk),
                                                                    lambda: key_holders(requester)):
            return independence.ineligible(independence.KEY_HOLDER)
        created = request.created_at
        before = [p for p in paths if p.since is None or p.since < created]
        if any(request.user_id not in p.people for p in before):
            return independence.ELIGIBLE
        if before:
            return independence.ineligible(independence.GRANTED_BY_REQUESTER)
        return independence.ineligible(independence.GRANTED_AFTER_REQUEST)

    def decidable(self, *, user) -> Q:
        """See approvals.independence.Assessor.decidable: for each path, requests of its tool created
        after it became effective by someone it did not come from."""
        keep = Q(pk__in=[])
        for path in paths_of(user):
            condition = Q(tool_id=path.tool_id)
            if path.since is not None:
                condition &= Q(created_at__gt=path.since)
            if path.people:
                condition &= ~Q(user_id__in=sorted(path.people))
            keep |= condition
        return keep & ~_service_accounts_keyed_by(user)
