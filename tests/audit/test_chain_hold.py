"""The tenant's audit-chain head is locked only at the end of a transaction: a transaction's audit
rows are chained as its last statement, right before its COMMIT (audit.chain.append_chained), and
still commit or roll back with it. Proven with real concurrent connections on PostgreSQL."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
from django.db import DataError, close_old_connections, connection, connections, transaction

from audit import events
from audit.verify_reference import verify_tenant
from audit.models import AuditChainHead, AuditEvent
from tools.catalog.models import Order


# Inside a test case's transaction (rolled back at the test's end: the code's outermost block stands
# for the COMMIT) and with real commits.
BOTH_WAYS = pytest.mark.parametrize("committed", [
    pytest.param(False, id="test-transaction"),
    pytest.param(True, id="committed", marks=pytest.mark.django_db(transaction=True)),
])


def _audit(user, message: str, **fields) -> AuditEvent:
    return events.tool_call_decided(tenant_id=user.tenant_id, actor_id=user.pk, decision="EXECUTED",
                                    tool_name="cancel_order", status=fields.pop("status", "OK"),
                                    masked_arguments={"order_id": "A2026****0001"}, duration_ms=1.0,
                                    message=message, **fields)


def _business_write(user, order_id: str) -> None:
    """What a governed call changes besides its audit row (here: one order)."""
    Order.objects.create(tenant=user.tenant, order_id=order_id, status=Order.Status.PAID, amount=Decimal("10.00"),
                         customer_name="Hold Test", customer_phone="13800000000", shipping_address="Road 1")


def _seqs(user) -> list[int]:
    return list(AuditEvent.objects.filter(tenant=user.tenant).order_by("chain_seq").values_list("chain_seq", flat=True))


@pytest.mark.postgres
def test_another_transaction_advances_the_head_while_the_first_still_does_its_business_writes(
        transactional_db, requester):
    # given: transaction A has written its audit row and is still doing its business writes
    written, finish = threading.Event(), threading.Event()
    seen: dict[str, object] = {}
    before = AuditEvent.objects.filter(tenant=requester.tenant).count()

    def transaction_a() -> None:
        close_old_connections()
        try:
            with transaction.atomic():
                event = _audit(requester, "A: the governed call")
                _business_write(requester, "A900000000001")
                seen["pid"] = connection.connection.info.backend_pid
                seen["seq while open"] = event.chain_seq
                written.set()
                finish.wait(10)
                _business_write(requester, "A900000000002")
            seen["seq after commit"] = event.chain_seq
        finally:
            connections.close_all()

    thread = threading.Thread(target=transaction_a)
    thread.start()
    try:
        assert written.wait(10)
        # when: transaction B writes an audit row of the same tenant and commits, refusing to wait
        # for any lock (with the head locked by A it would fail with "lock timeout")
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            b = _audit(requester, "B: another call of the tenant")
        with connection.cursor() as cursor:
            cursor.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [seen["pid"]])
            a_state = cursor.fetchone()[0]
    finally:
        finish.set()
        thread.join(10)

    # then: B committed first, while A was still open; A took the next position at its COMMIT
    assert a_state == "idle in transaction"
    assert seen["seq while open"] is None
    assert b.chain_seq == before + 1
    assert seen["seq after commit"] == before + 2
    assert list(AuditEvent.objects.filter(tenant=requester.tenant, chain_seq__gt=before).order_by("chain_seq")
                .values_list("message", flat=True)) == ["B: another call of the tenant", "A: the governed call"]
    assert Order.objects.filter(order_id__in=["A900000000001", "A900000000002"]).count() == 2
    assert verify_tenant(requester.tenant).ok


@pytest.mark.postgres
def test_concurrent_governed_transactions_of_one_tenant_keep_one_unbroken_chain(transactional_db, requester):
    # given: 8 connections, each running 15 transactions shaped like a governed call (audit row,
    # then business writes), some with two audit rows, a rolled-back savepoint or a rollback
    threads, per_thread = 8, 15
    start = threading.Barrier(threads)
    before = AuditEvent.objects.filter(tenant=requester.tenant).count()

    def worker(index: int) -> int:
        close_old_connections()
        try:
            start.wait()
            committed = 0
            for i in range(per_thread):
                order_id = f"A9{index:05d}{i:05d}"
                try:
                    with transaction.atomic():
                        _audit(requester, f"t{index} call {i}")
                        _business_write(requester, order_id)
                        if i % 4 == 1:
                            try:
                                with transaction.atomic():
                                    _audit(requester, f"dropped t{index} {i}")
                                    raise RuntimeError("the savepoint rolls back")
                            except RuntimeError:
                                pass
                        if i % 3 == 2:
                            _audit(requester, f"t{index} call {i}, second row")
                            committed += 1
                        if i % 5 == 4:
                            raise ValueError("the whole transaction rolls back")
                    committed += 1
                except ValueError:
                    committed -= 1 if i % 3 == 2 else 0
            return committed
        finally:
            connections.close_all()

    # when
    with ThreadPoolExecutor(threads) as pool:
        committed = sum(pool.map(worker, range(threads)))

    # then: each committed row has its own position, without gaps; nothing rolled back is chained
    assert _seqs(requester) == list(range(1, before + committed + 1))
    assert not AuditEvent.objects.filter(message__startswith="dropped").exists()
    assert AuditChainHead.objects.get(tenant=requester.tenant).seq == before + committed
    assert verify_tenant(requester.tenant).ok


@BOTH_WAYS
def test_a_rolled_back_savepoint_drops_its_audit_row_and_the_rest_stays_in_order(committed, requester):
    before = AuditEvent.objects.filter(tenant=requester.tenant).count()

    with transaction.atomic():
        _audit(requester, "kept, first")
        try:
            with transaction.atomic():
                _audit(requester, "dropped with its savepoint")
                raise RuntimeError("roll back to the savepoint")
        except RuntimeError:
            pass
        _audit(requester, "kept, second")

    rows = list(AuditEvent.objects.filter(tenant=requester.tenant, chain_seq__gt=before).order_by("chain_seq")
                .values_list("chain_seq", "message"))
    assert rows == [(before + 1, "kept, first"), (before + 2, "kept, second")]
    assert verify_tenant(requester.tenant).ok


@BOTH_WAYS
def test_a_rolled_back_transaction_leaves_neither_row_nor_head_advance(committed, requester):
    _audit(requester, "before")
    head = AuditChainHead.objects.get(tenant=requester.tenant).seq

    with pytest.raises(RuntimeError):
        with transaction.atomic():
            _audit(requester, "rolled back")
            _business_write(requester, "A900000000003")
            raise RuntimeError("the call failed")

    assert AuditChainHead.objects.get(tenant=requester.tenant).seq == head
    assert not AuditEvent.objects.filter(message="rolled back").exists()
    assert not Order.objects.filter(order_id="A900000000003").exists()


@pytest.mark.postgres
def test_an_audit_row_that_cannot_be_written_fails_the_whole_transaction(transactional_db, requester):
    # given: a row the database refuses (a status longer than its column), written before the
    # business change of the same transaction
    head = AuditChainHead.objects.filter(tenant=requester.tenant).values_list("seq", flat=True).first()

    # when: the row is sent at the COMMIT and refused
    with pytest.raises(DataError):
        with transaction.atomic():
            _audit(requester, "refused", status="X" * 100)
            _business_write(requester, "A900000000004")

    # then: nothing of the transaction committed (fail closed), and the connection works on
    assert not Order.objects.filter(order_id="A900000000004").exists()
    assert AuditChainHead.objects.filter(tenant=requester.tenant).values_list("seq", flat=True).first() == head
    assert _audit(requester, "after").chain_seq == (head or 0) + 1
