"""`python manage.py issue_api_token --user NAME [--rotate] [--name NAME] [--expires-days N]`: issue
an API key and print it (once: only its digest is stored, django-rest-knox).

For a platform operator at a server's shell (whoever has that shell is one): the key goes to this
command's standard output only, never to a log line or an audit row; the issue (and each key
revoked by --rotate) is audited as CONTROL_CHANGE of kind api_token with actor_role "shell
(manage.py issue_api_token)" (docs/operations.md, "API keys"). Programs send the key as
`Authorization: Token <key>`; `TOKEN=$(python manage.py issue_api_token --user acme-requester)`
works. Each run issues a new key; --rotate revokes the user's other keys first.
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentplatform.tenancy.credentials import api_token_issue
from core.errors import DomainError
from agentplatform.tenancy.actor import acting_via

SHELL = "shell (manage.py issue_api_token)"


class Command(BaseCommand):
    help = "Issue an API key for a user and print it once; --rotate revokes their other keys."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="Username, e.g. acme-requester.")
        parser.add_argument("--rotate", action="store_true", help="Revoke the user's other keys first.")
        parser.add_argument("--name", default="issued by manage.py", help="The key's name.")
        parser.add_argument("--expires-days", type=int, default=None,
                            help="Days until it expires (default API_KEY_TTL_DAYS; 0 = never, if allowed).")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user named {options['user']!r}")
        try:
            with acting_via(SHELL):
                key = api_token_issue(user=user, rotate=options["rotate"], name=options["name"],
                                      expires_in_days=options["expires_days"])
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stdout.write(key)
