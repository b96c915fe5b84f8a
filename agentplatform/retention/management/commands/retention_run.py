"""`python manage.py retention_run [--tenant SLUG] [--dry-run]`: apply the retention of every tenant
(or one) now: archive, then delete what is past its time (agentplatform.retention.services).

Prints one line per tenant: the days applied, the rows deleted (or due, with --dry-run) per class
and each archive file written. Exits 0; 1 when a tenant could not be done (its audit chain is
broken, or a file could not be written); 2 for an unknown tenant.
"""
from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from agentplatform.retention.services import retention_run
from agentplatform.tenancy.actor import acting_via
from agentplatform.tenancy.models import Tenant
from audit.archive import ArchiveRefused


class Command(BaseCommand):
    help = "Archive, then delete, what each tenant's retention says is past its time."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", metavar="SLUG", help="only this tenant")
        parser.add_argument("--dry-run", action="store_true", help="count what is due; write and delete nothing")

    def handle(self, *args, tenant: str | None = None, dry_run: bool = False, **options) -> None:
        tenants = Tenant.objects.order_by("slug")
        if tenant:
            tenants = tenants.filter(slug=tenant)
            if not tenants.exists():
                raise CommandError(f"no tenant with slug {tenant!r}", returncode=2)
        failed = 0
        with acting_via("shell (manage.py retention_run)"):
            for each in tenants:
                try:
                    report = retention_run(tenant=each, dry_run=dry_run)
                except (ArchiveRefused, OSError) as error:
                    failed += 1
                    self.stdout.write(f"FAILED {each.slug}: {error}")
                    continue
                if report.skipped:
                    self.stdout.write(f"SKIPPED {each.slug}: another retention run holds its lock")
                    continue
                counts = ", ".join(f"{k} {v}" for k, v in report.deleted.items()) or "nothing"
                verb = "due" if dry_run else "deleted"
                self.stdout.write(f"{'DRY-RUN' if dry_run else 'OK'} {each.slug}: {verb} {counts} "
                                  f"(days {report.days})")
                for archive in report.archives:
                    self.stdout.write(f"  archived {archive['kind']} {archive['rows']} rows -> {archive['path']} "
                                      f"sha256 {archive['sha256']}")
        if failed:
            sys.exit(1)
