"""`python manage.py issue_api_token --user NAME [--rotate]`: print a user's API token.

Programs send it as `Authorization: Token <key>`. Only the key is printed (so
`TOKEN=$(python manage.py issue_api_token --user acme-requester)` works); never log it.
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentplatform.api.services import api_token_issue
from agentplatform.errors import DomainError


class Command(BaseCommand):
    help = "Print the API token of a user (created on first use); --rotate replaces it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="Username, e.g. acme-requester.")
        parser.add_argument("--rotate", action="store_true", help="Replace the token; the old one stops working.")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user named {options['user']!r}")
        try:
            key = api_token_issue(user=user, rotate=options["rotate"])
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stdout.write(key)
