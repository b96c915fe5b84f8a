"""`manage.py seed_demo`: the demo tenants, users, tools and orders, without playing the story
(compose.yaml runs it after `migrate`). Idempotent: a second run changes nothing."""
from django.core.management.base import BaseCommand

from agentplatform.runtime.demo.seed import seed_demo


class Command(BaseCommand):
    help = "Seed the demo tenants, users, tools and orders (idempotent)."

    def handle(self, *args, **options) -> None:
        people = seed_demo()
        self.stdout.write(f"seeded tenants: {', '.join(sorted(people))}")
