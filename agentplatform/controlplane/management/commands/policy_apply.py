"""`python manage.py policy_apply --tenant SLUG bundle.yaml [--check] [--comment TEXT] [--as USERNAME]`:
validate a policy bundle against the tool catalog, print the unified diff against the version in
force, and apply it as the tenant's next version (docs/policy.md, "Applying a bundle").

--check only validates and diffs. --as names the person applying it (a platform operator or an
administrator of the tenant); without it the shell applies it (whoever has a server's shell is an
operator) and the audit row says "shell (manage.py policy_apply)". A bundle that loosens a HIGH or
CRITICAL tool, applied --as a tenant administrator, is proposed as a control change instead.

Exit status: 0 applied, unchanged or valid (--check); 1 a bad bundle (every error printed as
"where: message", the version in force kept) or a refused actor; 3 POLICY_BUNDLE_LOOSENS (the
pending change's id printed; a second administrator or a platform operator approves it).
`-` reads the bundle from standard input.
"""
from __future__ import annotations

import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentplatform.controlplane.bundles import policy_bundle_apply
from agentplatform.tenancy.actor import acting_via
from agentplatform.tenancy.models import Tenant
from core.errors import DomainError
from policies.errors import BundleInvalid

SHELL = "shell (manage.py policy_apply)"
EXIT_INVALID = 1
EXIT_LOOSENS = 3


class Command(BaseCommand):
    help = "Validate, diff and apply a tenant's policy bundle (YAML or JSON); --check only validates and diffs."

    def add_arguments(self, parser) -> None:
        parser.add_argument("bundle", help="The bundle file (YAML or JSON); - for standard input.")
        parser.add_argument("--tenant", required=True, help="The tenant's slug, e.g. acme.")
        parser.add_argument("--check", action="store_true", help="Only validate and print the diff.")
        parser.add_argument("--comment", default="", help="Why this version (stored with it, audited).")
        parser.add_argument("--as", dest="as_user", default=None,
                            help="Username of the administrator applying it (default: the shell).")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        actor = None
        if options["as_user"]:
            actor = get_user_model().objects.filter(username=options["as_user"]).first()
            if actor is None:
                raise CommandError(f"no user named {options['as_user']!r}")
        path = options["bundle"]
        try:
            if path == "-":
                raw = sys.stdin.buffer.read()
            else:
                with open(path, "rb") as handle:
                    raw = handle.read()
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error.strerror}") from error
        try:
            with acting_via(SHELL):
                outcome = policy_bundle_apply(tenant=tenant, text=raw, actor=actor, check=options["check"],
                                              comment=options["comment"])
        except BundleInvalid as error:
            for problem in error.errors:
                self.stderr.write(f"{problem['where']}: {problem['message']}")
            raise CommandError(f"{error.code}: {len(error.errors)} error(s); version in force unchanged",
                               returncode=EXIT_INVALID) from error
        except DomainError as error:
            raise CommandError(f"{error.code}: {error.message}", returncode=EXIT_INVALID) from error
        if outcome.diff:
            self.stdout.write(outcome.diff, ending="")
        for sentence in outcome.loosens:
            self.stdout.write(f"loosens: {sentence}")
        name = f"{tenant.slug}"
        if outcome.status == "unchanged":
            self.stdout.write(f"unchanged: {name} v{outcome.version} is in force")
        elif outcome.status == "checked":
            self.stdout.write(f"valid: would become {name} v{outcome.previous + 1}"
                              + (" after a second administrator approves it" if outcome.needs_second_person else ""))
        elif outcome.status == "applied":
            self.stdout.write(f"applied: {name} v{outcome.version} is in force (was v{outcome.previous})")
        else:
            self.stderr.write(f"{outcome.code}: not applied; control change {outcome.change.pk} waits for a second "
                              f"administrator or a platform operator (v{outcome.version} stays in force)")
            raise CommandError(f"{outcome.code} {outcome.change.pk}", returncode=EXIT_LOOSENS)
