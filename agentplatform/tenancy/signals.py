"""Signals of the tenancy app, for the apps above it (tenancy imports none of them)."""
from __future__ import annotations

from django.dispatch import Signal

# Sent inside the transaction that moved a user to another tenant, after the tenancy app removed
# their grants and memberships (agentplatform.tenancy.moves). Arguments: user (saved, already in
# the new tenant), old_tenant_id (int), new_tenant_id (int or None), actor_id (int or None).
# Receivers end what they own of the old tenant's authority (API keys, open requests, running
# runs) in that same transaction and audit it; an exception rolls the move back.
user_tenant_changed = Signal()
