"""Signals the approvals app emits. The agent runtime (a higher app) listens; we never import it.

`confirmation_settled(sender, request_id, run_id, status)` is sent inside the transaction that
settled a request (CONFIRMED, CANCELLED or EXPIRED); receivers defer their work with
`transaction.on_commit`, so a rolled-back decision enqueues nothing.
"""
from django.dispatch import Signal

confirmation_settled = Signal()
