"""agentplatform.pgbackend: a savepoint travels with the first statement after it (one round trip
for both), and means exactly what Django's savepoint means: a failed statement right after it,
a rolled-back block, nested blocks, writes through the raw psycopg connection, `executemany` and
a named cursor are all undone to the right point and no further.

The wire is read with libpq's own protocol trace: every round trip ends with a Sync (extended
protocol) or is one simple Query."""
from __future__ import annotations

import tempfile
import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from psycopg import pq

from core.sql.statements import update_row
from agentplatform.runtime.models import Conversation

pytestmark = pytest.mark.postgres


class Wire:
    """The statements the connection sends while the block runs, grouped by round trip."""

    def __enter__(self):
        connection.ensure_connection()
        self._file = tempfile.TemporaryFile(mode="w+")
        self._pgconn = connection.connection.pgconn
        self._pgconn.trace(self._file.fileno())
        self._pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc):
        self._pgconn.untrace()
        self._file.seek(0)
        self.trips: list[list[str]] = []
        current: list[str] = []
        for line in self._file.read().splitlines():
            parts = line.split("\t")
            if len(parts) < 3 or parts[0] != "F":
                continue
            kind, rest = parts[2], parts[3] if len(parts) > 3 else ""
            if kind == "Parse":  # ' "<name>" "<text>" n ...': the statement's first word
                text = rest.split('"', 4)[3] if rest.count('"') >= 4 else rest
                current.append(text.split()[0].upper())
            elif kind == "Bind" and not current:
                current.append("PREPARED")
            elif kind == "Query":
                self.trips.append([rest.strip().strip('"').split()[0].upper()])
            elif kind == "Sync":
                if current:
                    self.trips.append(current)
                current = []
        self._file.close()
        return False

    def words(self) -> list[str]:
        return [w for trip in self.trips for w in trip]


@pytest.fixture
def conversation(db, requester):
    return Conversation.objects.create(tenant_id=requester.tenant_id, user=requester, title="start")


def _title(conversation) -> str:
    return Conversation.objects.values_list("title", flat=True).get(pk=conversation.pk)


def test_a_savepoint_is_sent_with_the_next_statement_in_one_round_trip(conversation):
    with Wire() as wire, transaction.atomic():  # a savepoint inside the test's transaction
        Conversation.objects.filter(pk=conversation.pk).update(title="one")
        with transaction.atomic():
            Conversation.objects.filter(pk=conversation.pk).update(title="two")

    assert [trip for trip in wire.trips if "SAVEPOINT" in trip] == [["SAVEPOINT", "UPDATE"]] * 2
    assert "RELEASE" not in wire.words()
    assert _title(conversation) == "two"


def test_a_block_that_sends_nothing_costs_nothing(conversation):
    with Wire() as wire:
        with transaction.atomic():
            with transaction.atomic():
                pass
        with pytest.raises(RuntimeError), transaction.atomic():
            raise RuntimeError

    assert wire.trips == []


def test_a_failed_statement_right_after_the_savepoint_rolls_back_to_it_and_no_further(conversation, requester):
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(title="kept")
        with pytest.raises(IntegrityError), transaction.atomic():
            # The first statement of the block fails: its savepoint was sent with it, before it.
            Conversation.objects.create(id=conversation.pk, tenant_id=requester.tenant_id, user=requester, title="x")
        Conversation.objects.filter(pk=conversation.pk).update(title=_title(conversation) + " and after")

    assert _title(conversation) == "kept and after"


def test_nested_savepoints_sent_together_roll_back_each_to_its_own_point(conversation):
    with transaction.atomic():
        with transaction.atomic():  # outer and inner savepoints both deferred ...
            with pytest.raises(RuntimeError), transaction.atomic():
                with Wire() as wire:
                    Conversation.objects.filter(pk=conversation.pk).update(title="inner")  # ... sent here
                raise RuntimeError
            assert _title(conversation) == "start"  # the inner block alone is undone
            Conversation.objects.filter(pk=conversation.pk).update(title="outer")
        assert _title(conversation) == "outer"
        with pytest.raises(RuntimeError), transaction.atomic():
            with transaction.atomic():
                Conversation.objects.filter(pk=conversation.pk).update(title="deep")
            raise RuntimeError  # the outer block rolls back with the inner one it contains
        assert _title(conversation) == "outer"

    assert wire.trips[0][:3] == ["SAVEPOINT", "SAVEPOINT", "SAVEPOINT"] and wire.trips[0][-1] == "UPDATE"


def test_a_prebuilt_update_reports_its_row_count_with_a_savepoint_before_it(conversation):
    with transaction.atomic():
        with transaction.atomic():
            assert update_row(Conversation, conversation.pk, {"title": "changed"}) == 1
        with transaction.atomic():
            assert update_row(Conversation, uuid.uuid4(), {"title": "nobody"}) == 0
    assert _title(conversation) == "changed"


def test_writes_through_the_raw_connection_executemany_and_a_named_cursor_roll_back_too(conversation):
    table = Conversation._meta.db_table
    with pytest.raises(RuntimeError), transaction.atomic():
        connection.connection.execute(f'UPDATE "{table}" SET title = %s WHERE id = %s', ["raw", conversation.pk])
        raise RuntimeError
    assert _title(conversation) == "start"

    with pytest.raises(RuntimeError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.executemany(f'UPDATE "{table}" SET title = %s WHERE id = %s', [["many", conversation.pk]])
        raise RuntimeError
    assert _title(conversation) == "start"

    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            Conversation.objects.filter(pk=conversation.pk).update(title="before the named cursor")
            with transaction.atomic():  # deferred when the named cursor declares itself
                titles = list(Conversation.objects.filter(pk=conversation.pk)
                              .values_list("title", flat=True).iterator(chunk_size=1))
            raise RuntimeError
    assert titles == ["before the named cursor"] and _title(conversation) == "start"
