"""Writes of the agent runtime: conversations, chat turns and run cancellation (the entry points
views, the CLI and the demo call).

Each function opens its own transactions and must not be called inside one (a chat turn calls
the model between them), except `runs_cancel_for_moved_user`, which runs inside the caller's."""
from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.db.models import Q

from core import clock, correlation
from core.errors import ConflictError, InvalidInputError, NotFoundError, PermissionDeniedError
from core.redaction.text import mask_text, redact_tokens
from agentplatform.runtime import loop, resume
from agentplatform.runtime.events import EventRecorder
from agentplatform.runtime.leases import RunClaimLost
from agentplatform.runtime.outcome import Listener, RunOutcome
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from agentplatform.tenancy.roles import administered_tenant_id, is_platform_operator
from agentplatform.runtime.selectors import conversation_get, conversation_uuid
from core.text import storable_text
from approvals import cancellation, requester_actions
from approvals.errors import ConfirmationNotFound
from approvals.models import ConfirmationRequest
from audit import events as audit
from core.redaction.fields import mask_value
from tools.calls import PendingConfirmation

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 8000


def conversation_new(*, user, title: str = "", max_chars: int = 200) -> Conversation:
    """A new conversation for `user` in their tenant, not saved yet: the run of its first message
    stores it in the same transaction (loop.run_create). `title` is masked, then cut to `max_chars`
    (the first message's first 60 characters: cut first, a card number cut in half would no longer
    be recognised as one). Raises PermissionDeniedError without a tenant."""
    if user.tenant_id is None:
        raise PermissionDeniedError("a user without a tenant cannot chat")
    # User text is stored masked: a token or card number pasted as the first message must not
    # become the title.
    return Conversation(tenant_id=user.tenant_id, user=user, title=mask_text(title)[:min(max_chars, 200)])


@transaction.atomic
def conversation_create(*, user, title: str = "", max_chars: int = 200) -> Conversation:
    """Create a conversation for `user` in their tenant (`title` as `conversation_new`). Raises
    PermissionDeniedError without a tenant. A title the user already has on another conversation
    gets a number (" (2)", " (3)", ...) so the list tells them apart."""
    conversation = conversation_new(user=user, title=title, max_chars=max_chars)
    if conversation.title:
        same = Conversation.objects.filter(
            Q(title=conversation.title) | Q(title__startswith=conversation.title + " ("),
            tenant_id=user.tenant_id, user=user).count()
        if same:
            suffix = f" ({same + 1})"
            conversation.title = conversation.title[:200 - len(suffix)] + suffix
    conversation.save(force_insert=True)
    return conversation


# How much of the user's previous message counts as what came just before a new one (a card named
# there makes "exp 12/29" in the next message card data): the reach of a label's "near a card".
_MASK_CONTEXT_CHARS = 200


def _masked_message(message: str, conversation: Conversation) -> str:
    """`message` (stripped) as it is stored, shown and sent to the model: masked, with the end of the
    user's previous message in this conversation as its context, so card data given across two
    messages ("my card 4111…" then "exp 12/29") is masked as it would be in one."""
    context = ""
    if not conversation._state.adding:
        previous = (Message.objects.filter(conversation=conversation, role="user").order_by("-created_at")
                    .values_list("content", flat=True).first())
        context = (previous or "")[-_MASK_CONTEXT_CHARS:] + "\n" if previous else ""
    return mask_text(message.strip(), context=context)


def chat_send(
    *,
    user,
    message: str,
    conversation_id: uuid.UUID | str | None = None,
    confirmation_token: str | None = None,
    request_id: str = "",
    listener: Listener | None = None,
) -> RunOutcome:
    """One chat request: start a run for `message`, or, with `confirmation_token`, confirm that
    pending call of this conversation and resume its run.

    Returns the RunOutcome (run, pending confirmations with the requester's tokens shown once).
    Raises InvalidInputError (blank or oversized message), NotFoundError (other user's or tenant's
    conversation), ConfirmationNotFound/ConfirmationExpired/ConfirmationAlreadyDecided (token path),
    ToolPermissionDenied (the model proposed a tool this user may not use).
    """
    if conversation_id is None:
        if confirmation_token:
            raise InvalidInputError("a confirmation token needs the conversation_id it belongs to")
        conversation = conversation_new(user=user, title=storable_text(message or "")[:MAX_MESSAGE_CHARS],
                                        max_chars=60)
    elif confirmation_token:
        # The token is looked up with this conversation id, the user and the tenant: only the
        # user's own request in this conversation matches, so the conversation is not read first.
        return _confirm_and_resume(user=user, conversation_id=conversation_uuid(conversation_id),
                                   token=confirmation_token, listener=listener)
    else:
        conversation = conversation_get(user=user, conversation_id=conversation_id)
    if not isinstance(message, str) or not message.strip():
        raise InvalidInputError("message must be a non-blank string")
    message = storable_text(message)  # NUL / lone surrogates: PostgreSQL cannot store them
    if len(message) > MAX_MESSAGE_CHARS:
        raise InvalidInputError(f"message exceeds {MAX_MESSAGE_CHARS} characters")
    try:
        return loop.run_start(user=user, message=_masked_message(message, conversation), conversation=conversation,
                              request_id=request_id, listener=listener)
    except RunClaimLost as lost:
        return _as_it_stands(user=user, run_id=lost.run_id)


def _confirm_and_resume(*, user, conversation_id: uuid.UUID, token: str, listener) -> RunOutcome:
    # The token is looked up once, locked, inside the decision's transaction, and must belong to
    # this conversation. The decision commits; this request then resumes the run itself (with
    # eager tasks the on-commit task stands aside: resume.resuming_inline).
    try:
        with resume.resuming_inline():
            request = requester_actions.confirmation_confirm(token=token, user=user, conversation_id=conversation_id)
    except ConfirmationNotFound:
        raise ConfirmationNotFound("no confirmation with this token in this conversation") from None
    try:
        outcome = run_continue(run_id=request.run_id, listener=listener)
    except RunClaimLost:
        outcome = None
    except Exception:  # noqa: BLE001 - the decision committed: answer with the run as it stands
        # The loop already ended the run with the error's code (or left it to recovery); the
        # decision's answer is not turned into an error (as with the on-commit resume).
        logger.exception("resume of run %s after its confirmation failed", request.run_id)
        outcome = None
    if outcome is None:
        run = Run.objects.get(pk=request.run_id)
        # Still waiting for other calls of the same turn: the client holds their tokens, and
        # re-issuing would void them. Otherwise a worker (or the eager on-commit task) resumed it,
        # and the tokens it minted for new calls never reached anyone.
        still_waiting = str(request.pk) in (run.state.get("pending") or {}).values()
        outcome = outcome_with_fresh_tokens(user=user, run=run, reissue=not still_waiting)
    return outcome


def outcome_with_fresh_tokens(*, user, run: Run, reissue: bool = True) -> RunOutcome:
    """The outcome of `run` as it stands, with a fresh token for each of the user's own pending
    requester-confirmed calls (approver-gated calls carry none; none at all when not `reissue`)."""
    pending = []
    for request in ConfirmationRequest.objects.filter(pk__in=list((run.state.get("pending") or {}).values()),
                                                      status=ConfirmationRequest.Status.PENDING):
        token = None
        if reissue and request.policy == ConfirmationRequest.Policy.REQUESTER and request.user_id == user.pk:
            token = requester_actions.confirmation_issue_token(request_id=request.pk, user=user)
        pending.append(PendingConfirmation.from_request(request, tool_call_id=request.tool_call_id, token=token))
    return RunOutcome(run, pending=pending)


def run_continue(*, run_id, listener: Listener | None = None) -> RunOutcome | None:
    """Resume `run_id` if it can be resumed now (idempotent; see claims.run_resume)."""
    return resume.resume_now(run_id=run_id, listener=listener)


def _as_it_stands(*, user, run_id) -> RunOutcome:
    """The outcome of this request's own run as the database has it now: this process lost the
    run (cancelled, or taken over by recovery), so it answers with the truth instead of an error."""
    run = Run.objects.get(pk=run_id, user=user)
    return outcome_with_fresh_tokens(user=user, run=run, reissue=False)


def _may_cancel(*, actor, run: Run) -> bool:
    """The requester, or an administrator of the run's tenant (docs/roles.md: a tenant
    administrator of that tenant; a platform operator who is a member of it). A platform operator
    without a tenant cancels runs from the admin, not through this API (its lookup is scoped by the
    actor's tenant and answers 404)."""
    return run.user_id == actor.pk or is_platform_operator(actor) or administered_tenant_id(actor) == run.tenant_id


def run_cancel(*, run_id, actor, reason: str = "") -> Run:
    """Cancel a run that has not finished (RUNNING or AWAITING_CONFIRMATION): it becomes CANCELLED
    (error_code RUN_CANCELLED), each of its open confirmation requests CANCELLED with the reason,
    all audited in one transaction; a DONE event tells open streams. A holder still working on it
    loses it: its next fenced write or tool execution stops (nothing runs after the cancel).

    actor: the requester, or a tenant administrator of the run's tenant. Returns the run. Raises
    NotFoundError (unknown id, another tenant's run, or another user's run for a non-administrator)
    and ConflictError (code RUN_FINISHED) for a run that already ended.
    """
    run = Run.objects.filter(pk=_uuid_or_none(run_id), tenant_id=actor.tenant_id).first() \
        if actor.tenant_id is not None else None
    if run is None or not _may_cancel(actor=actor, run=run):
        raise NotFoundError("run not found")
    who = actor.get_username()
    # The reason is stored and shown: tokens redacted, personal data masked, like any user text.
    said = mask_value("reason", redact_tokens(reason.strip()[:300])) if reason and reason.strip() else ""
    why = f"cancelled by {who}" + (f": {said}" if said else "")
    with transaction.atomic(durable=True):
        changed = Run.objects.filter(pk=run.pk, status__in=(Run.Status.RUNNING, Run.Status.AWAITING_CONFIRMATION)) \
            .update(status=Run.Status.CANCELLED, lease_expires_at=None, error_code="RUN_CANCELLED",
                    error_message=why[:500], updated_at=clock.now())
        if changed != 1:
            raise ConflictError(f"run {run.pk} already ended ({run.status})", code="RUN_FINISHED")
        cancellation.confirmations_cancel_for_run(run_id=run.pk, actor_id=actor.pk, reason=why)
        audit.run_cancelled(tenant_id=run.tenant_id, actor_id=actor.pk, status="RUN_CANCELLED",
                     request_id=run.request_id, conversation_id=run.conversation_id, run_id=run.pk, message=why)
    run.refresh_from_db()
    recorder = EventRecorder(run)
    recorder.emit(RunEvent.Type.ERROR, {"code": "RUN_CANCELLED", "message": why[:500]})
    recorder.emit(RunEvent.Type.DONE, {"status": run.status})
    return run


def runs_cancel_for_moved_user(*, user_id: int, tenant_id: int, actor_id: int | None) -> list[uuid.UUID]:
    """Cancel every unfinished run (RUNNING or AWAITING_CONFIRMATION) of `user_id` in `tenant_id`
    and every open confirmation request they made there, inside the caller's transaction (the
    move of the user to another tenant: docs/roles.md). Each run is audited (CANCELLED,
    RUN_CANCELLED); its DONE event is emitted after the commit. Returns the run ids cancelled."""
    assert transaction.get_connection().in_atomic_block, "called inside the transaction of the move"
    why = "cancelled: the requester was moved to another tenant"
    cancelled = []
    for run in Run.objects.filter(user_id=user_id, tenant_id=tenant_id,
                                  status__in=(Run.Status.RUNNING, Run.Status.AWAITING_CONFIRMATION)).order_by("pk"):
        changed = Run.objects.filter(pk=run.pk, status__in=(Run.Status.RUNNING, Run.Status.AWAITING_CONFIRMATION)) \
            .update(status=Run.Status.CANCELLED, lease_expires_at=None, error_code="RUN_CANCELLED",
                    error_message=why, updated_at=clock.now())
        if changed != 1:
            continue
        cancellation.confirmations_cancel_for_run(run_id=run.pk, actor_id=actor_id, reason=why)
        audit.run_cancelled(tenant_id=run.tenant_id, actor_id=actor_id, status="RUN_CANCELLED",
                     request_id=run.request_id, conversation_id=run.conversation_id, run_id=run.pk, message=why)
        cancelled.append(run.pk)
    cancellation.confirmations_cancel_for_requester(user_id=user_id, tenant_id=tenant_id, actor_id=actor_id, reason=why)

    def tell_streams() -> None:
        for run in Run.objects.filter(pk__in=cancelled):
            recorder = EventRecorder(run)
            recorder.emit(RunEvent.Type.ERROR, {"code": "RUN_CANCELLED", "message": why})
            recorder.emit(RunEvent.Type.DONE, {"status": run.status})

    if cancelled:
        transaction.on_commit(tell_streams)
    return cancelled


def _uuid_or_none(value) -> uuid.UUID | None:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None


def chat_start(*, user, message: str, conversation_id: uuid.UUID | str | None = None, request_id: str = "") -> Run:
    """Start a run for `message` without waiting for it (POST /chat/ with `Prefer: respond-async`).

    The run is stored RUNNING and parked (no lease); a worker, or a background thread when tasks
    are eager, claims and drives it (runtime/resume.py). Returns the run. Raises InvalidInputError
    (blank or oversized message), NotFoundError (another user's conversation), PermissionDeniedError (no
    tenant). A tool the user may not use fails the run (PERMISSION_DENIED) instead of raising.
    """
    if not isinstance(message, str) or not message.strip():
        raise InvalidInputError("message must be a non-blank string")
    if len(message) > MAX_MESSAGE_CHARS:
        raise InvalidInputError(f"message exceeds {MAX_MESSAGE_CHARS} characters")
    if conversation_id is None:
        conversation = conversation_create(user=user, title=message, max_chars=60)
    else:
        conversation = conversation_get(user=user, conversation_id=conversation_id)
    with transaction.atomic():
        # Masked as chat_send masks it: the message is stored, shown and sent to the model.
        run = loop.run_create(user=user, message=_masked_message(message, conversation), conversation=conversation,
                              request_id=request_id)
        resume.drive_later(run_id=run.pk)
    correlation.set_run_id(run.pk)
    return run
