"""`python manage.py audit_verify [--tenant SLUG] [--full] [--workers N]`: verify the audit hash chain (audit.chain).

By default each tenant's chain is checked from its verification checkpoint (audit.verify_checkpoint:
the checkpoint is re-derived first, then only the rows after it are checked); `--full` checks every
row from the first. A run that passes moves the checkpoint to its last row. docs/audit.md says what
each catches; run the default every few minutes (the scheduled task audit.verify_chains does) and
`--full` weekly. A long run is split among `--workers` processes (AUDIT_VERIFY_WORKERS: the
machine's cores, at most 4), each checking a range of the chain in one shared snapshot
(audit.verify_parallel); the result is the same as one process's.

Prints one line per tenant: `OK <slug>: <n> events, head <seq> <hash>` (with `after the checkpoint
at chain_seq=<s>` when it started there) or `BROKEN <slug>: <the first fault, naming the row>`. Exits
0 when every chain holds, 1 when one is broken, 2 for an unknown tenant. Anchor the printed head
hashes outside the database (a ticket, a signed log, a WORM bucket): a later run that prints a
different hash for an old head position proves a rewrite.
"""
from __future__ import annotations

import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agentplatform.tenancy.models import Tenant
from audit.verify_checkpoint import chain_verify


class Command(BaseCommand):
    help = ("Verify the audit hash chain of every tenant (or one) from its checkpoint, or from the first row "
            "with --full; exit 1 naming the first broken row.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", metavar="SLUG", help="only this tenant")
        parser.add_argument("--full", action="store_true",
                            help="check every row from the first, not only those after the checkpoint")
        parser.add_argument("--workers", type=int, default=None, metavar="N",
                            help="processes to split a long chain among (default AUDIT_VERIFY_WORKERS)")

    def handle(self, *args, tenant: str | None = None, full: bool = False, workers: int | None = None,
               **options) -> None:
        workers = settings.AUDIT_VERIFY_WORKERS if workers is None else workers
        if workers < 1:
            raise CommandError("--workers must be 1 or more", returncode=2)
        tenants = Tenant.objects.order_by("slug")
        if tenant:
            tenants = tenants.filter(slug=tenant)
            if not tenants.exists():
                raise CommandError(f"no tenant with slug {tenant!r}", returncode=2)
        broken = 0
        for each in tenants:
            verdict = chain_verify(tenant=each, full=full, workers=workers)
            if verdict.ok:
                since = f" after the checkpoint at chain_seq={verdict.start_seq}" if verdict.start_seq else ""
                self.stdout.write(f"OK {verdict.tenant_slug}: {verdict.rows} events{since}, "
                                  f"head {verdict.head_seq} {verdict.head_hash or '-'}")
            else:
                broken += 1
                self.stdout.write(f"BROKEN {verdict.tenant_slug}: {verdict.problem}")
        if broken:
            self.stderr.write(f"{broken} audit chain(s) broken")
            sys.exit(1)
