"""core.sql.select.select_rows / insert_instance / Together: the prebuilt reads and writes of the hot
path give back what the ORM gives back: the same rows, in the same order, with the same
Python values (JSON, UUIDs, datetimes, booleans), related rows attached, on PostgreSQL and SQLite."""
from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from core import clock
from core.sql.batches import Together
from core.sql.select import select_rows, update_rows
from core.sql.statements import insert_instance
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from approvals.models import ConfirmationRequest
from tools.models import Tool


def _values(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


@pytest.fixture
def stored(db, requester):
    """A conversation with a run, five messages (two without a run, one with tool calls) and events."""
    conversation = insert_instance(Conversation(tenant_id=requester.tenant_id, user=requester, title="t"))
    run = insert_instance(Run(tenant_id=requester.tenant_id, user=requester, conversation=conversation,
                              request_id="r1", state={"messages": [{"role": "user", "content": "hi"}],
                                                      "pending": {"c1": str(uuid.uuid4())}, "internal": True}))
    rows = [
        Message(conversation=conversation, run=None, role="user", content="one"),
        Message(conversation=conversation, run=run, role="assistant", content="", in_memory=False,
                tool_calls=[{"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}]),
        Message(conversation=conversation, run=run, role="tool", content="{\"ok\": true}", tool_call_id="c1"),
        Message(conversation=conversation, run=None, role="user", content="four 四"),
        Message(conversation=conversation, run=run, role="assistant", content="five"),
    ]
    for message in rows:
        insert_instance(message)
    for seq in (1, 2, 7):
        RunEvent.objects.create(run=run, seq=seq, type="TEXT_DELTA", payload={"n": seq})
    return conversation, run, rows


def test_insert_instance_stores_what_the_orm_reads_back(stored):
    conversation, run, rows = stored

    assert not run._state.adding and isinstance(rows[0].pk, int)  # the database's key, set on the instance
    for message in rows:
        assert _values(Message.objects.get(pk=message.pk)) == _values(message)
    assert _values(Run.objects.get(pk=run.pk)) == _values(run)
    assert Conversation.objects.get(pk=conversation.pk).created_at == conversation.created_at  # auto_now_add


@pytest.mark.parametrize("where, order_by, limit, orm", [
    ({"conversation_id": None}, ("id",), None, lambda qs, c, r: qs.filter(conversation_id=None)),
    ({"in_memory": True}, ("-id",), 2, lambda qs, c, r: qs.filter(in_memory=True).order_by("-id")[:2]),
    ({"run_id__ne": "RUN"}, ("id",), None, lambda qs, c, r: qs.exclude(run=r)),  # NULL runs kept, as exclude()
    ({"run_id": None}, ("-id",), None, lambda qs, c, r: qs.filter(run__isnull=True).order_by("-id")),
    ({"run_id__isnull": False, "role": "tool"}, ("id",), None, lambda qs, c, r: qs.filter(run__isnull=False, role="tool")),
    ({"role__in": ["user", "tool"]}, ("id",), None, lambda qs, c, r: qs.filter(role__in=["user", "tool"])),
    ({"id__gt": "FIRST", "id__lte": "THIRD"}, ("id",), None, None),
])
def test_select_rows_matches_the_orm(stored, where, order_by, limit, orm):
    conversation, run, rows = stored
    swap = {"RUN": run.pk, "FIRST": rows[0].pk, "THIRD": rows[2].pk}
    where = {k: swap.get(v, v) if isinstance(v, str) else v for k, v in where.items()}
    scoped = "conversation_id" not in where  # the first case asks for conversation_id IS NULL instead
    if scoped:
        where["conversation_id"] = conversation.pk

    got = select_rows(Message, where, order_by=order_by, limit=limit)

    base = Message.objects.filter(conversation=conversation) if scoped else Message.objects
    expected = list(orm(base.order_by(*order_by), conversation, run)) if orm else rows[1:3]
    assert expected or not scoped  # each scoped case selects something
    assert [_values(m) for m in got] == [_values(m) for m in expected]
    assert all(not m._state.adding for m in got)


def test_an_empty_in_list_matches_nothing_and_sends_nothing(stored, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert select_rows(Message, {"role__in": []}) == []
        assert select_rows(Message, {"role": "user"}, any_of={}) == []


def test_any_of_is_an_or_group_anded_with_the_rest(stored):
    conversation, run, rows = stored

    got = select_rows(Message, {"conversation_id": conversation.pk, "run_id__isnull": True},
                      any_of={"content": "one", "role": "assistant", "tool_call_id__in": []}, order_by=("id",))

    assert [m.pk for m in got] == [rows[0].pk]  # "five" is an assistant message but has a run


def test_related_rows_and_extra_columns_are_attached(stored, django_assert_num_queries):
    conversation, run, rows = stored

    expected = (run.tenant.slug, run.user.username, "t")
    with transaction.atomic(), django_assert_num_queries(1):
        [got] = select_rows(Run, {"id": run.pk}, related=("tenant", "user", "conversation"), for_update=True,
                            extra={"last_event_seq": "SELECT MAX(e.seq) FROM runtime_runevent e WHERE e.run_id = {t}.id"})
        # read from the joined row: no query of their own
        assert (got.tenant.slug, got.user.username, got.conversation.title) == expected
    assert got.last_event_seq == 7
    assert _values(got) == _values(Run.objects.get(pk=run.pk))
    assert got.state["pending"] == run.state["pending"] and isinstance(got.conversation_id, uuid.UUID)


def test_a_nullable_relation_without_a_row_is_none(stored):
    conversation, run, rows = stored

    got = select_rows(Message, {"conversation_id": conversation.pk}, related=("run",), order_by=("id",))

    assert [m.run.pk if m.run else None for m in got] == [None, run.pk, run.pk, None, run.pk]


def test_datetimes_and_json_come_back_as_the_orm_gives_them(db, requester, stored):
    conversation, run, rows = stored
    request = insert_instance(ConfirmationRequest(
        tenant_id=requester.tenant_id, user=requester, conversation_id=conversation.pk, run_id=run.pk, tool_call_id="c1",
        tool_id=Tool.objects.get(name="cancel_order").pk,
        tool_name="cancel_order", arguments={"order_id": "A1", "amount": "1.50"}, masked_arguments={},
        arguments_hash="h" * 64, summary="s", risk="HIGH", policy="REQUESTER", quorum=1,
        expires_at=clock.now() + datetime.timedelta(minutes=5), approval_context={"facts": {"n": [1, "二"]}}))

    [got] = select_rows(ConfirmationRequest, {"conversation_id": str(conversation.pk), "expires_at__gt": clock.now(),
                                              "status__in": ("PENDING", "CONFIRMED")})

    assert _values(got) == _values(ConfirmationRequest.objects.get(pk=request.pk))
    assert got.expires_at.tzinfo is not None and got.approval_context == {"facts": {"n": [1, "二"]}}


def test_together_sends_inserts_and_updates_as_one_statement(db, requester, django_assert_num_queries):
    conversation = Conversation(tenant_id=requester.tenant_id, user=requester, title="new")
    run = Run(tenant_id=requester.tenant_id, user=requester, conversation=conversation, request_id="r2",
              state={"messages": []})
    message = Message(conversation=conversation, run=run, role="user", content="hello")

    with transaction.atomic():
        together = Together()
        together.insert_instance(conversation)  # the run and the message refer to it in the same statement
        together.insert_instance(run)
        together.insert_instance(message)
        with django_assert_num_queries(1 if connection.vendor == "postgresql" else 3):
            results = together.send()

    assert results == [[conversation.pk], [run.pk], [message.pk]] and isinstance(message.pk, int)
    assert _values(Message.objects.get(pk=message.pk)) == _values(message)
    assert Run.objects.get(pk=run.pk).conversation_id == conversation.pk
    assert not run._state.adding


def test_a_together_update_that_does_not_match_changes_nothing_and_says_so(db, requester, stored):
    conversation, run, rows = stored

    with transaction.atomic():
        together = Together()
        missed = together.update(Run, run.pk, {"iterations": 5}, where={"status": "COMPLETED"})
        hit = together.update(Conversation, conversation.pk, {"title": "renamed"})
        events = together.insert(RunEvent, [{"run_id": run.pk, "seq": 8, "type": "DONE", "payload": {}},
                                            {"run_id": run.pk, "seq": 9, "type": "DONE", "payload": {"x": 1}}])
        results = together.send()

    assert results[missed] == [] and results[hit] == [conversation.pk] and len(results[events]) == 2
    assert Run.objects.get(pk=run.pk).iterations == 0 and Conversation.objects.get(pk=conversation.pk).title == "renamed"
    assert list(RunEvent.objects.filter(run=run, seq__gt=7).order_by("seq").values_list("id", flat=True)) == \
        results[events]  # the ids come back in the rows' order


def test_a_failing_part_stores_no_part(db, requester, stored):
    conversation, run, rows = stored

    with pytest.raises(IntegrityError), transaction.atomic():
        together = Together()
        together.insert(Message, [{"conversation_id": conversation.pk, "run_id": run.pk, "role": "user",
                                   "content": "lost"}])
        together.insert(RunEvent, [{"run_id": run.pk, "seq": 7, "type": "DONE", "payload": {}}])  # seq taken
        together.send()

    assert not Message.objects.filter(content="lost").exists()


def test_together_needs_a_transaction(transactional_db):
    together = Together()
    together.insert(Conversation, [{"tenant_id": 1, "user_id": 1, "title": "x"}])  # refused before it is sent
    with pytest.raises(RuntimeError):
        together.send()


@pytest.mark.postgres
def test_a_successful_savepoint_is_left_to_its_transaction(db, requester, stored):
    from django.test.utils import CaptureQueriesContext

    conversation, run, rows = stored
    with CaptureQueriesContext(connection) as captured:
        with transaction.atomic():  # a savepoint inside the test's transaction
            Conversation.objects.filter(pk=conversation.pk).update(title="kept")
            with transaction.atomic():
                Conversation.objects.filter(pk=conversation.pk).update(title="inner")
            with pytest.raises(RuntimeError), transaction.atomic():
                Conversation.objects.filter(pk=conversation.pk).update(title="undone")
                raise RuntimeError
    sent = [q["sql"].split()[0] for q in captured.captured_queries]

    # The savepoints travel with the next statement, below Django's cursor (test_deferred_savepoints.py).
    assert "RELEASE" not in sent and "SAVEPOINT" not in sent and sent.count("ROLLBACK") == 1
    assert Conversation.objects.get(pk=conversation.pk).title == "inner"  # the failed block alone undone

    with pytest.raises(RuntimeError), transaction.atomic():
        with transaction.atomic():
            Conversation.objects.filter(pk=conversation.pk).update(title="outer fails")
        raise RuntimeError
    assert Conversation.objects.get(pk=conversation.pk).title == "inner"  # the unreleased inner one with it


def test_only_reads_the_named_fields_and_a_no_key_lock_reads_the_row(stored, django_assert_num_queries):
    conversation, run, rows = stored

    with transaction.atomic(), django_assert_num_queries(1):
        [got] = select_rows(Run, {"id": run.pk, "status": run.status}, for_update="no key", only=("status",))
    assert got.pk == run.pk and got.get_deferred_fields() >= {"state", "request_id"}
    assert "status" not in got.get_deferred_fields() and got.status == run.status
    assert select_rows(Run, {"id": run.pk, "status": "COMPLETED"}, for_update="no key", only=("id",)) == []


def test_an_in_literal_condition_is_written_into_the_statement(db, requester, stored):
    conversation, run, rows = stored
    request = insert_instance(ConfirmationRequest(
        tenant_id=requester.tenant_id, user=requester, conversation_id=conversation.pk, run_id=run.pk, tool_call_id="c1",
        tool_id=Tool.objects.get(name="cancel_order").pk, tool_name="cancel_order", arguments={}, masked_arguments={},
        arguments_hash="h" * 64, summary="s", risk="HIGH", policy="REQUESTER", quorum=1,
        expires_at=clock.now() + datetime.timedelta(minutes=5)))
    where = {"conversation_id": str(conversation.pk)}
    with CaptureQueriesContext(connection) as captured:
        [got] = select_rows(ConfirmationRequest, {**where, "status__in_literal": ("PENDING", "CONFIRMED")})
        assert select_rows(ConfirmationRequest, {**where, "status__in_literal": ("CONSUMED",)}) == []
    assert got.pk == request.pk
    assert "IN ('PENDING', 'CONFIRMED')" in captured.captured_queries[0]["sql"]
    changed = update_rows(ConfirmationRequest, {"pk": request.pk, "status__in_literal": ("PENDING",)},
                          {"status": "CANCELLED"})
    assert [r.status for r in changed] == ["CANCELLED"]
    # only the code's own names: anything that could carry SQL (or is not text) is refused
    for values in (("PENDING'); DROP TABLE x; --",), (), (1,), ("two words",)):
        with pytest.raises(ValueError):
            select_rows(ConfirmationRequest, {**where, "status__in_literal": values})
