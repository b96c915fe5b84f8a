"""Every control-plane change becomes an AuditEvent (decision CONTROL_CHANGE) in the transaction
of the change, with actor, tenant, object and old -> new values, whoever makes it and wherever.

Why model signals (docs/roles.md, "Where the audit hook lives"): the control plane is changed by
the admin, by guardian's object-permission screens, by guardian's `assign_perm`/`remove_perm`, by
the seed, by services and by anyone in `manage.py shell`. A service layer would only see the
callers that remember to use it; guardian's own views and shortcuts would bypass it. Every one of
those paths goes through `Model.save()`, `delete()` or an m2m manager, which send
pre/post_save, post_delete and m2m_changed, so one receiver per model covers them all, and the
receiver runs inside the caller's transaction (the admin's views, our services and the guardian
views we wrap are atomic). A trigger-based library (django-pghistory) would also see raw SQL, but
it writes its own event tables, not our append-only, hash-chained AuditEvent; and the actor would
still have to be passed in from Python. What signals do not see: `QuerySet.update()` and
`bulk_create()` on these models, and raw SQL; no code of ours uses those on control-plane models
(tests/controlplane/test_audit_hooks.py guards the paths we use).

Rows are written through `audit.events.control_change_recorded`, never raw ORM. The modules:
- `changes`: `control_change`, the writer of every control-plane row (also used by the services);
- `watched`: which models and relations are audited and how each row describes them;
- `rows`: the save, delete and many-to-many receivers that turn a change into rows;
- `service_accounts`: the receivers that refuse to make a service account an approver.
Each connects its receivers from AppConfig.ready.
"""
