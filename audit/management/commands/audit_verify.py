"""`python manage.py audit_verify [--tenant SLUG]`: recompute the audit hash chain (audit.chain).

Prints one line per tenant: `OK <slug>: <n> events, head <seq> <hash>` or `BROKEN <slug>: <the
first fault, naming the row>`. Exits 0 when every chain holds, 1 when one is broken, 2 for an
unknown tenant. Anchor the printed head hashes outside the database (a ticket, a signed log, a
WORM bucket): a later run that prints a different hash for an old head position proves a rewrite.
"""
from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from agentplatform.tenancy.models import Tenant
from audit.chain import verify_tenant


class Command(BaseCommand):
    help = "Verify the audit hash chain of every tenant (or one); exit 1 naming the first broken row."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", metavar="SLUG", help="only this tenant")

    def handle(self, *args, tenant: str | None = None, **options) -> None:
        tenants = Tenant.objects.order_by("slug")
        if tenant:
            tenants = tenants.filter(slug=tenant)
            if not tenants.exists():
                raise CommandError(f"no tenant with slug {tenant!r}", returncode=2)
        broken = 0
        for each in tenants:
            report = verify_tenant(each)
            if report.ok:
                self.stdout.write(f"OK {report.tenant_slug}: {report.rows} events, "
                                  f"head {report.head_seq} {report.head_hash or '-'}")
            else:
                broken += 1
                self.stdout.write(f"BROKEN {report.tenant_slug}: {report.problem}")
        if broken:
            self.stderr.write(f"{broken} audit chain(s) broken")
            sys.exit(1)
