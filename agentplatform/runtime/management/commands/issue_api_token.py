"""`python manage.py issue_api_token --user NAME [--rotate] [--name NAME] [--expires-days N]`: issue
an API key and print it (once: only its digest is stored, django-rest-knox).

Programs send it as `Authorization: Token <key>`. Only the key is printed (so
`TOKEN=$(python manage.py issue_api_token --user acme-requester)` works); never log it. Each run
issues a new key; --rotate revokes the user's other keys first.
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentplatform.api.models import ApiKey
from agentplatform.api.services import api_key_issue, api_key_revoke
from agentplatform.errors import DomainError


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
            if options["rotate"]:
                for public_id in ApiKey.objects.filter(user=user).values_list("public_id", flat=True):
                    api_key_revoke(public_id=public_id, actor=user)  # audited, one by one
            key = api_key_issue(user=user, name=options["name"], expires_in_days=options["expires_days"])[1]
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stdout.write(key)
