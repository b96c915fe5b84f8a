"""Dual control at the model layer: every path that would empower an approver or loosen a
HIGH/CRITICAL tool's policy passes one of these guards (docs/roles.md, "Trust model").

The guards, one module per kind of change, each connecting its own receivers (AppConfig.ready):
- `grants`: who holds approve_tool (a grant to a user or a group, a member added to such a group);
- `accounts`: administrators (staff, superuser) and the re-activation of an approver or administrator;
- `policies`: a looser effective policy of a HIGH/CRITICAL tool (Tool or TenantToolPolicy);
and `gate`, what they share: the decision to let a change through or refuse it, and the record of
where standing came from.

Guarded changes: a `tools.approve_tool` object permission given to a user or a group (guardian's
`assign_perm`, its admin pages, a row saved by hand), a member added to a group holding it (from
either side of the many-to-many), an account holding it re-activated (directly or through a
group), an account made staff or superuser (or an administrator re-activated), and a Tool or
TenantToolPolicy change that makes a HIGH/CRITICAL tool's effective policy looser (tools.policy).

Who may make them:
- code applying an approved control change (`gate.applying(change)`, set only by
  `agentplatform.controlplane.services.control_change_approve`): applied, its standing recorded
  with the change's people;
- code with no acting person (`manage.py shell`, the demo seed, migrations, Celery): applied
  directly and audited as such ("system (no request: shell, task or seed)"), its standing recorded
  with no proposer. Someone with a shell on the server is outside the tenant model;
- anyone else, administrator or operator: refused with ControlChangeRequired, before anything is
  written; the admin turns it into a proposal (agentplatform.controlplane.middleware).

Tightening (revoking, removing a member, deactivating, a stricter policy) is never guarded.
What signals do not see (QuerySet.update, bulk_create, a membership's through row saved by hand,
which Django saves without signals, raw SQL) is not used by our code on these models
(agentplatform.controlplane.receivers says the same for the audit): it is a shell's act.
"""
