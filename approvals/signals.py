"""Signals the approvals app emits. Higher apps (the agent runtime, notifications) listen; we never
import them.

`confirmation_settled(sender, request_id, run_id, status, policy)` is sent inside the transaction that
settled a request (CONFIRMED, CANCELLED or EXPIRED); receivers defer their work with
`transaction.on_commit`, so a rolled-back decision enqueues nothing.

`approvers_needed(sender, request_id, tenant_id)` is sent inside the transaction that made an
approver-gated request PENDING (created, or sent back to waiting under a stricter policy);
receivers (notifications) defer their work with `transaction.on_commit` as well.
"""
from django.dispatch import Signal

confirmation_settled = Signal()
approvers_needed = Signal()
