"""The one clock of the platform, replaceable in tests (as Django's token generator does)."""
from __future__ import annotations

import datetime

from django.utils import timezone


def now() -> datetime.datetime:
    """Return the current aware UTC datetime. Tests patch `core.clock.now`."""
    return timezone.now()
