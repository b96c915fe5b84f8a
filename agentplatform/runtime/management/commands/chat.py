"""`python manage.py chat --user NAME`: talk to the agent in the terminal.

Each line is a chat message; `/confirm` and `/cancel` decide the latest call waiting for your
confirmation (the one-time token stays inside this process and is never printed in full);
`/new` starts a new conversation; `/quit` (or end of input) leaves.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from agentplatform.runtime import services
from agentplatform.runtime.models import RunEvent
from agentplatform.tenancy.models import User
from approvals import requester_actions

HELP = "commands: /confirm  /cancel  /new  /quit   (anything else is sent to the agent)"


class Command(BaseCommand):
    help = "Chat with the agent in the terminal as a given user."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="username, e.g. acme-requester")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["user"], is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {options['user']!r} (run `python manage.py demo` to seed demo users)")
        self.user, self.conversation, self.tokens = user, None, []
        self.stdout.write(f"agentplatform chat as {user.username} (tenant {user.tenant}). {HELP}")
        while True:
            try:
                line = input("you> ").strip()
            except EOFError:
                self.stdout.write("")
                return
            if not line:
                continue
            if line == "/quit":
                return
            try:
                self.dispatch(line)
            except DomainError as error:
                self.stdout.write(self.style.ERROR(f"refused: {error.code}: {error.message}"))

    def dispatch(self, line: str) -> None:
        if line == "/new":
            self.conversation, self.tokens = None, []
            self.stdout.write("(new conversation)")
        elif line in ("/confirm", "/cancel"):
            if not self.tokens:
                self.stdout.write("nothing is waiting for your confirmation")
                return
            token = self.tokens.pop()
            if line == "/cancel":
                requester_actions.confirmation_cancel(token=token, user=self.user)
                self.stdout.write("(cancelled)")
            outcome = services.chat_send(user=self.user, message=line, conversation_id=self.conversation,
                                         confirmation_token=token) if line == "/confirm" else None
            if outcome is not None:
                self.after(outcome)
        else:
            outcome = services.chat_send(user=self.user, message=line, conversation_id=self.conversation,
                                         listener=self.print_event)
            self.after(outcome)

    def after(self, outcome) -> None:
        self.conversation = outcome.run.conversation_id
        for pending in outcome.pending:
            if pending.token:
                self.tokens.append(pending.token)
                self.stdout.write(self.style.WARNING(
                    f"  ⚠ {pending.summary} [{pending.risk}] — type /confirm or /cancel (expires {pending.expires_at})"))
            else:
                self.stdout.write(self.style.WARNING(
                    f"  ⏳ {pending.summary} [{pending.risk}] — waiting for {pending.quorum} approver(s)"))
        if outcome.run.final_answer:
            self.stdout.write(self.style.SUCCESS(f"agent> {outcome.run.final_answer}"))

    def print_event(self, event: RunEvent) -> None:
        if event.type in (RunEvent.Type.TOOL_CALL_STARTED, RunEvent.Type.TOOL_EXECUTION_COMPLETED, RunEvent.Type.ERROR):
            sys.stdout.write(f"  · {event.type} {json.dumps(event.payload, ensure_ascii=False)}\n")
