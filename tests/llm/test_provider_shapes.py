"""Every provider shape read right, every provider failure reported clearly (docs/providers.md).

Each shape and failure goes through `POST /api/v1/chat/`, the real agent loop and the
real `openai` SDK against the local fake server, streamed and not where both apply. A strict
fake server (tests/llm/fake_openai_server.validate_request) answers 400 to any request a strict
provider would refuse, so a history the platform replays wrongly fails the run here. Each test
asserts what executed (database rows), what the model received next, what the API answered and
what the audit trail says.
"""
from __future__ import annotations

import json
import logging
import time

import pytest
from rest_framework.test import APIClient

from agentplatform.tenancy.credentials import api_token_issue
from agentplatform.llm.factory import reset_client
from agentplatform.runtime import services
from agentplatform.runtime.models import Message, Run, RunEvent
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.llm import fake_openai_server as shapes
from tests.llm.fake_openai_server import FakeOpenAIServer, turn_response
from tools.catalog.models import Cancellation, Order

API_KEY = "sk-test-4f1c9a1b2c3d4e5f"
ORDER = "A202607290001"  # acme, PAID
OTHER_ORDER = "A202607290003"  # acme, PAID
CANCEL = {"order_id": ORDER, "reason": "customer changed their mind"}
CANCEL_OTHER = {"order_id": OTHER_ORDER, "reason": "duplicate order"}
INVENTORY = {"sku": "SKU-10001", "warehouse_code": "WH-HZ-01"}


@pytest.fixture(params=[False, True], ids=["json", "sse"])
def stream(request, settings) -> bool:
    settings.LLM_STREAM = request.param
    return request.param


def _point_at(server: FakeOpenAIServer, settings) -> FakeOpenAIServer:
    settings.LLM_API_KEY = API_KEY
    settings.LLM_BASE_URL = server.url
    settings.LLM_MODEL = "gpt-4o-mini"
    settings.LLM_MAX_RETRIES = 2
    reset_client()
    return server


@pytest.fixture
def provider(settings):
    """A strict OpenAI-compatible fake server the platform talks to (2 retries allowed)."""
    with FakeOpenAIServer(strict="openai") as server:
        yield _point_at(server, settings)
    reset_client()


@pytest.fixture
def deepseek(settings):
    """A fake server enforcing DeepSeek's thinking-mode rule on top of the strict checks."""
    with FakeOpenAIServer(strict="deepseek") as server:
        yield _point_at(server, settings)
    reset_client()


def chat(user, message: str, conversation_id=None) -> dict:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user)}")
    body = {"message": message} if conversation_id is None else {"message": message,
                                                                  "conversation_id": str(conversation_id)}
    response = client.post("/api/v1/chat/", body, format="json")
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    assert response.status_code == 200, response.json()
    return response.json()


@pytest.fixture
def confirm(django_capture_on_commit_callbacks):
    """confirm(user, token): POST /api/v1/confirmations/confirm/, running the resume enqueued on commit."""

    def post(user, token: str) -> dict:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user)}")
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post("/api/v1/confirmations/confirm/", {"token": token}, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    return post


def sent(server: FakeOpenAIServer, index: int) -> list[dict]:
    return server.requests[index].body["messages"]


def tool_answers(messages: list[dict]) -> dict[str, dict]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


def assistant_calls(messages: list[dict]) -> list[dict]:
    return [call for m in messages if m["role"] == "assistant" for call in m.get("tool_calls") or ()]


def audit_of(run_id) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(run_id=run_id).order_by("occurred_at", "id"))


# -- 1. two calls of one turn with the same id (or none) -------------------------------------------

@pytest.mark.parametrize("call_id", ["functions.cancel_order:0", None], ids=["kimi-same-id", "no-id"])
def test_1_calls_sharing_an_id_are_each_governed_executed_and_answered(requester, provider, stream, call_id, confirm):
    provider.enqueue(shapes.kimi_duplicate_ids(stream=stream, name="cancel_order", arguments=[CANCEL, CANCEL_OTHER],
                                               call_id=call_id))
    provider.enqueue(turn_response(stream=stream, content="Both orders are cancelled."))

    started = chat(requester, f"cancel {ORDER} and {OTHER_ORDER}")

    # the API: two pending calls with distinct ids and one token each
    assert started["status"] == "AWAITING_CONFIRMATION"
    pending = started["pending"]
    assert len(pending) == 2 and len({p["tool_call_id"] for p in pending}) == 2
    assert all(p["token"] for p in pending)
    requests = ConfirmationRequest.objects.filter(run_id=started["run_id"])
    assert sorted(r.arguments["order_id"] for r in requests) == [ORDER, OTHER_ORDER]
    assert {r.tool_call_id for r in requests} == {p["tool_call_id"] for p in pending}

    # when: the requester confirms both tokens
    confirm(requester, pending[0]["token"])
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID  # still waiting
    confirm(requester, pending[1]["token"])

    # then: both orders cancelled once, both confirmations consumed
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == Run.Status.COMPLETED and run.final_answer == "Both orders are cancelled."
    assert {o.status for o in Order.objects.filter(tenant=requester.tenant, order_id__in=[ORDER, OTHER_ORDER])} \
        == {Order.Status.CANCELLED}
    assert Cancellation.objects.count() == 2
    assert set(ConfirmationRequest.objects.filter(run_id=run.pk).values_list("status", flat=True)) == {"CONSUMED"}
    # the model's next request: unique ids, each answered once with its own order's success
    follow_up = sent(provider, 1)
    calls = assistant_calls(follow_up)
    assert len(calls) == 2 and len({c["id"] for c in calls}) == 2
    answers = tool_answers(follow_up)
    assert set(answers) == {c["id"] for c in calls}
    by_order = {json.loads(c["function"]["arguments"])["order_id"]: answers[c["id"]] for c in calls}
    assert by_order[ORDER]["success"] and by_order[OTHER_ORDER]["success"]
    assert by_order[ORDER]["data"]["order_id"] == ORDER and by_order[OTHER_ORDER]["data"]["order_id"] == OTHER_ORDER
    assert provider.rejections == []
    # the audit trail: one confirmation asked and one execution per call id
    executed = [a for a in audit_of(run.pk) if a.decision == "EXECUTED"]
    assert sorted(a.tool_call_id for a in executed) == sorted(c["id"] for c in calls)
    assert len([a for a in audit_of(run.pk) if a.decision == "CONFIRMATION_REQUIRED"]) == 2


def test_1_an_id_reused_in_a_later_turn_of_the_run_gets_a_fresh_one(requester, provider, stream):
    # Kimi numbers calls per turn, so the second turn's call repeats the first turn's id.
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "functions.list_orders:0", "name": "list_orders",
                                                          "arguments": "{}"}]))
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "functions.list_orders:0", "name": "list_orders",
                                                          "arguments": '{"status": "PAID"}'}]))
    provider.enqueue(turn_response(stream=stream, content="Listed."))

    body = chat(requester, "list my orders twice")

    assert body["status"] == "COMPLETED"
    ids = [c["id"] for c in assistant_calls(sent(provider, 2))]
    assert len(ids) == 2 and len(set(ids)) == 2 and ids[0] == "functions.list_orders:0"
    assert set(tool_answers(sent(provider, 2))) == set(ids)
    assert sorted(a.tool_call_id for a in audit_of(body["run_id"]) if a.decision == "EXECUTED") == sorted(ids)
    assert provider.rejections == []


# -- 2. a phantom entry beside a real call -----------------------------------------------------------

def test_2_an_entry_without_name_and_arguments_is_dropped_and_the_real_call_runs(requester, provider, stream, caplog):
    provider.enqueue(shapes.phantom_entry(stream=stream, name="query_inventory", arguments=INVENTORY))
    provider.enqueue(turn_response(stream=stream, content="120 units."))

    with caplog.at_level(logging.WARNING, logger="agentplatform.llm.normalize"):
        body = chat(requester, "How many SKU-10001 in WH-HZ-01?")

    assert body["status"] == "COMPLETED" and body["answer"] == "120 units."
    follow_up = sent(provider, 1)
    assert [c["id"] for c in assistant_calls(follow_up)] == ["call_real0001"]
    answers = tool_answers(follow_up)
    assert list(answers) == ["call_real0001"] and answers["call_real0001"]["success"] is True
    [row] = audit_of(body["run_id"])
    assert (row.decision, row.tool_name, row.tool_call_id) == ("EXECUTED", "query_inventory", "call_real0001")
    assert not AuditEvent.objects.filter(status__in=["TOOL_NOT_FOUND", "TURN_INCOMPLETE"]).exists()
    assert any("no name and no arguments" in r.getMessage() for r in caplog.records)
    assert provider.rejections == []


# -- 3. arguments sent as a JSON object ---------------------------------------------------------------

def test_3_object_arguments_are_accepted_and_stored_canonically(requester, provider, stream):
    provider.enqueue(shapes.object_arguments(stream=stream, name="query_inventory",
                                             arguments={"warehouse_code": "WH-HZ-01", "sku": "SKU-10001"}))
    provider.enqueue(turn_response(stream=stream, content="120 units."))

    body = chat(requester, "How many SKU-10001 in WH-HZ-01?")

    assert body["status"] == "COMPLETED" and body["run_id"]
    canonical = '{"sku":"SKU-10001","warehouse_code":"WH-HZ-01"}'
    [stored] = Message.objects.filter(run_id=body["run_id"], role="assistant", tool_calls__isnull=False)
    assert stored.tool_calls[0]["function"]["arguments"] == canonical
    assert assistant_calls(sent(provider, 1))[0]["function"]["arguments"] == canonical
    assert tool_answers(sent(provider, 1))["call_glm_0001"]["success"] is True
    [row] = audit_of(body["run_id"])
    assert row.decision == "EXECUTED" and row.masked_arguments == {"sku": "SKU-10001", "warehouse_code": "WH-HZ-01"}
    assert provider.rejections == []


# -- 4. text PostgreSQL cannot store ------------------------------------------------------------------

def test_4_nul_in_the_final_text_is_cleaned(requester, provider, stream):
    provider.enqueue(turn_response(stream=stream, content="Stock: 120\x00 units \ud800ok"))

    body = chat(requester, "How many SKU-10001?")

    assert body["status"] == "COMPLETED"
    assert body["answer"] == "Stock: 120\ufffd units \ufffdok"
    run = Run.objects.get(pk=body["run_id"])
    assert run.final_answer == body["answer"]
    assert Message.objects.get(run=run, role="assistant").content == body["answer"]
    texts = [e.payload["text"] for e in run.events.filter(type__in=["MODEL_TEXT", "FINAL_TEXT"])]
    assert texts and all("\x00" not in t and "\ud800" not in t for t in texts)
    assert audit_of(run.pk) == []  # no tool was proposed


def test_4_nul_in_a_streamed_text_delta_beside_a_call_is_cleaned(requester, provider, settings):
    settings.LLM_STREAM = True
    provider.enqueue(turn_response(stream=True, content="Let me\x00 check.", calls=[
        {"id": "call_inv_0001", "name": "query_inventory", "arguments": json.dumps(INVENTORY)}]))
    provider.enqueue(turn_response(stream=True, content="120 units."))

    body = chat(requester, "How many SKU-10001 in WH-HZ-01?")

    assert body["status"] == "COMPLETED"
    run = Run.objects.get(pk=body["run_id"])
    model_text = "".join(e.payload["text"] for e in run.events.filter(type="MODEL_TEXT").order_by("seq"))
    assert "Let me\ufffd check." in model_text and "\x00" not in model_text
    assert sent(provider, 1)[-2]["content"] == "Let me\ufffd check."
    assert [a.decision for a in audit_of(run.pk)] == ["EXECUTED"]
    assert provider.rejections == []


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_4_unstorable_text_in_arguments_is_refused_as_invalid_and_audited(requester, provider, stream, bad):
    provider.enqueue(shapes.nul_in_arguments(stream=stream, name="cancel_order",
                                             arguments={"order_id": ORDER, "reason": f"late{bad}"}))
    provider.enqueue(turn_response(stream=stream, content="I could not cancel it."))

    body = chat(requester, f"cancel {ORDER}")

    assert body["status"] == "COMPLETED" and body["answer"] == "I could not cancel it."
    answer = tool_answers(sent(provider, 1))["call_nul_0001"]
    assert (answer["success"], answer["code"]) == (False, "INVALID_ARGUMENTS")
    assert "cannot be processed" in answer["message"]
    # never replayed verbatim: the strict provider accepted the follow-up
    assert assistant_calls(sent(provider, 1))[0]["function"]["arguments"] == "{}"
    assert provider.rejections == []
    [row] = audit_of(body["run_id"])
    assert (row.decision, row.status, row.tool_name) == ("INVALID", "INVALID_ARGUMENTS", "cancel_order")
    assert row.masked_arguments is None
    assert not ConfirmationRequest.objects.exists() and not Cancellation.objects.exists()
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_4_user_text_postgres_cannot_store_is_refused_by_the_api(requester, approver1, bad):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=requester)}")
    # a JSON body can carry either escaped; the body is sent as raw JSON text
    raw = json.dumps({"message": f"hello{bad}"})

    response = client.post("/api/v1/chat/", raw, content_type="application/json")

    assert response.status_code == 400 and response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "INVALID_ARGUMENTS"
    assert not Run.objects.exists()
    # the same on the other free-text input: an approver's rejection reason
    refund = services.chat_send(user=requester, message="Refund order A202607290003 because it arrived damaged")
    [pending] = refund.pending
    approver = APIClient()
    approver.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=approver1)}")
    response = approver.post(f"/api/v1/approvals/{pending.confirmation_id}/reject/",
                             json.dumps({"reason": f"no{bad}"}), content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "INVALID_ARGUMENTS"
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == "PENDING"


def test_4_user_text_with_nul_is_cleaned_by_the_service(requester):
    # the service path (CLI, demo) cleans instead: the offline model answers it
    outcome = services.chat_send(user=requester, message="How many SKU-10001\x00 in WH-HZ-01?")
    stored = Message.objects.get(run=outcome.run, role="user").content
    assert "\x00" not in stored and "\ufffd" in stored
    assert "\x00" not in outcome.run.conversation.title


# -- 5. replay only arguments that parse ---------------------------------------------------------------

@pytest.mark.parametrize("shape", ["truncated", "invalid_json"])
def test_5_arguments_that_do_not_parse_are_replayed_as_an_empty_object(requester, provider, stream, shape):
    partial = f'{{"order_id": "{ORDER}", "rea'
    if shape == "truncated":
        provider.enqueue(shapes.truncated_arguments(stream=stream, name="cancel_order", partial=partial))
        code = "TURN_INCOMPLETE"
    else:
        provider.enqueue(turn_response(stream=stream, calls=[{"id": "call_cut_0001", "name": "cancel_order",
                                                              "arguments": partial + '",}'}]))
        code = "INVALID_ARGUMENTS"
    provider.enqueue(turn_response(stream=stream, content="Please repeat the request."))

    body = chat(requester, f"cancel {ORDER}")

    assert body["status"] == "COMPLETED"
    follow_up = sent(provider, 1)
    assert assistant_calls(follow_up)[0]["function"]["arguments"] == "{}"
    answer = tool_answers(follow_up)["call_cut_0001"]
    assert (answer["success"], answer["code"]) == (False, code)
    assert provider.rejections == []  # the strict provider accepted the replayed history
    # the run's own record keeps what the model sent
    [stored] = Message.objects.filter(run_id=body["run_id"], role="assistant", tool_calls__isnull=False)
    assert stored.tool_calls[0]["function"]["arguments"].startswith(partial)
    [row] = audit_of(body["run_id"])
    assert (row.decision, row.status) == ("INVALID", code)
    assert not ConfirmationRequest.objects.exists()


def test_5_the_strict_validator_refuses_what_a_strict_provider_refuses():
    base = [{"role": "user", "content": "hi"}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ok = [*base, {"role": "assistant", "content": None, "tool_calls": [call]},
          {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    assert shapes.validate_request({"messages": ok}) == ""
    broken = {
        "invalid arguments": [*base, {"role": "assistant", "tool_calls": [
            {**call, "function": {"name": "f", "arguments": '{"a": '}}]}, {"role": "tool", "tool_call_id": "c1"}],
        "duplicate ids": [*base, {"role": "assistant", "tool_calls": [call, call]},
                          {"role": "tool", "tool_call_id": "c1"}],
        "unanswered": [*base, {"role": "assistant", "tool_calls": [call]}, {"role": "user", "content": "x"}],
        "orphan tool": [*base, {"role": "tool", "tool_call_id": "c9", "content": "{}"}],
        "nul": [{"role": "user", "content": "a\x00"}],
    }
    for name, messages in broken.items():
        assert shapes.validate_request({"messages": messages}), name
    assert shapes.validate_request({"messages": ok}, "deepseek").startswith("Missing `reasoning_content`")


# -- 6. DeepSeek reasoning_content ------------------------------------------------------------------------

def test_6_reasoning_is_replayed_in_the_same_turn_and_never_shown_or_remembered(requester, deepseek, stream):
    thought = "The user wants stock; query_inventory answers that."
    deepseek.enqueue(shapes.deepseek_reasoning_call(stream=stream, name="query_inventory", arguments=INVENTORY,
                                                    reasoning=thought))
    deepseek.enqueue(turn_response(stream=stream, content="120 units.", reasoning="Answer with the number."))
    deepseek.enqueue(turn_response(stream=stream, content="You are welcome."))

    body = chat(requester, "How many SKU-10001 in WH-HZ-01?")

    assert body["status"] == "COMPLETED" and body["answer"] == "120 units."
    assert deepseek.rejections == []
    [assistant] = [m for m in sent(deepseek, 1) if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == thought
    run = Run.objects.get(pk=body["run_id"])
    assert all(thought not in e.payload.get("text", "") for e in run.events.all())
    assert not Message.objects.filter(content__contains="query_inventory answers").exists()
    assert [a.decision for a in audit_of(run.pk)] == ["EXECUTED"]

    # the next user message: no reasoning of the earlier turn is sent again
    chat(requester, "thanks", conversation_id=body["conversation_id"])
    assert all("reasoning_content" not in m for m in sent(deepseek, 2))
    assert deepseek.rejections == []


def test_6_reasoning_survives_a_confirmation_pause(requester, deepseek, settings, confirm):
    settings.LLM_STREAM = True
    deepseek.enqueue(shapes.deepseek_reasoning_call(stream=True, name="cancel_order", arguments=CANCEL,
                                                    reasoning="Cancel it as asked."))
    deepseek.enqueue(turn_response(stream=True, content="Cancelled."))

    started = chat(requester, f"cancel {ORDER}")
    confirm(requester, started["pending"][0]["token"])

    assert Run.objects.get(pk=started["run_id"]).final_answer == "Cancelled."
    [assistant] = [m for m in sent(deepseek, 1) if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "Cancel it as asked."
    assert deepseek.rejections == []
    assert Cancellation.objects.count() == 1


# -- 7, 8. provider failures -------------------------------------------------------------------------------

FAILURES = [
    # shape, code, words the message must contain
    (shapes.http_401_invalid_key, "MODEL_AUTH_FAILED", ["LLM_API_KEY", "HTTP 401", "Incorrect API key provided"]),
    (shapes.http_403_forbidden, "MODEL_AUTH_FAILED", ["LLM_API_KEY", "HTTP 403", "does not have access"]),
    (shapes.http_404_model_not_found, "MODEL_NOT_FOUND", ["LLM_MODEL", "LLM_BASE_URL", "does not exist"]),
    (shapes.http_400_rejected, "MODEL_REQUEST_REJECTED", ["HTTP 400", "Invalid schema for function"]),
    (shapes.http_429_request_too_large, "MODEL_REQUEST_TOO_LARGE", ["not a rate limit", "Request too large"]),
    (shapes.http_429_insufficient_quota, "MODEL_QUOTA_EXCEEDED", ["quota", "billing"]),
    (shapes.http_402_insufficient_balance, "MODEL_QUOTA_EXCEEDED", ["quota", "HTTP 402", "Insufficient Balance"]),
]


@pytest.mark.parametrize(("shape", "code", "words"), FAILURES, ids=[f[1] + "-" + f[0].__name__ for f in FAILURES])
def test_7_8_provider_failures_have_distinct_codes_and_are_not_retried(requester, provider, stream, shape, code,
                                                                       words):
    provider.enqueue(shape(), shape(), shape())

    body = chat(requester, "How many SKU-10001?")

    assert body["status"] == "FAILED" and body["answer"] is None
    assert body["error"]["code"] == code and body["error"]["retryable"] is False
    message = body["error"]["message"]
    assert all(w in message for w in words), message
    assert API_KEY not in message and provider.url.split("//")[1].split("/")[0] in message
    assert len(provider.requests) == 1  # not retried, although LLM_MAX_RETRIES=2
    run = Run.objects.get(pk=body["run_id"])
    assert (run.error_code, run.error_message) == (code, message[:500])
    [error] = run.events.filter(type=RunEvent.Type.ERROR)
    assert error.payload["code"] == code
    assert audit_of(run.pk) == []  # nothing was proposed, nothing ran


def test_7_the_providers_own_message_is_masked(requester, provider):
    provider.enqueue(shapes.error_response(401, f"Invalid key {API_KEY} (Bearer {API_KEY}); card 4111111111111111",
                                           type="invalid_request_error", code="invalid_api_key"))

    body = chat(requester, "hello")

    message = body["error"]["message"]
    assert API_KEY not in message and "4111111111111111" not in message and "4f1c9a1b" not in message
    assert "Invalid key" in message


def test_8_a_real_rate_limit_is_still_retried(requester, provider, stream):
    provider.enqueue(shapes.error_response(429, shapes.RATE_LIMIT_MESSAGE, type="requests",
                                           code="rate_limit_exceeded", headers={"retry-after-ms": "10"}),
                     turn_response(stream=stream, content="Hello."))

    body = chat(requester, "hello")

    assert body["status"] == "COMPLETED", body["error"]
    assert len(provider.requests) == 2


def test_8_a_rate_limit_that_outlasts_the_retries_reads_as_one(requester, provider, stream):
    for _ in range(3):
        provider.enqueue(shapes.error_response(429, shapes.RATE_LIMIT_MESSAGE, type="requests",
                                               code="rate_limit_exceeded", headers={"retry-after-ms": "10"}))

    body = chat(requester, "hello")

    assert (body["error"]["code"], body["error"]["retryable"]) == ("MODEL_RATE_LIMITED", True)
    assert "HTTP 429" in body["error"]["message"] and len(provider.requests) == 3


# -- 9. context_length_exceeded ------------------------------------------------------------------------------

def _earlier_exchanges(requester, provider, n: int, stream: bool) -> str:
    conversation_id = None
    for i in range(n):
        provider.enqueue(turn_response(stream=stream, content=f"answer {i} " + "x" * 400))
        conversation_id = chat(requester, f"question {i} " + "y" * 400, conversation_id)["conversation_id"]
    return conversation_id


def test_9_context_too_long_trims_the_oldest_turns_and_tool_results_then_retries_once(requester, provider, stream):
    conversation_id = _earlier_exchanges(requester, provider, 4, stream)
    before = len(provider.requests)
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "call_inv_0001", "name": "query_inventory",
                                                          "arguments": json.dumps(INVENTORY)}]),
                     shapes.http_400_context_length_exceeded(),
                     turn_response(stream=stream, content="120 units."))

    body = chat(requester, "How many SKU-10001 in WH-HZ-01?", conversation_id)

    assert body["status"] == "COMPLETED" and body["answer"] == "120 units."
    full, trimmed = sent(provider, before + 1), sent(provider, before + 2)
    assert len(provider.requests) == before + 3
    # the oldest turns went first; the system prompt and this run's messages stayed
    assert trimmed[0] == full[0]
    assert trimmed[-3:][0]["content"] == "How many SKU-10001 in WH-HZ-01?"
    assert "question 0" in json.dumps(full) and "question 0" not in json.dumps(trimmed)
    assert len(trimmed) < len(full)
    # the tool result is cut down to its code, and still answers its call id
    assert json.loads(full[-1]["content"])["data"]
    summary = json.loads(trimmed[-1]["content"])
    assert (trimmed[-1]["tool_call_id"], summary["success"], summary["code"]) == ("call_inv_0001", True, "OK")
    assert "data" not in summary
    assert [a.decision for a in audit_of(body["run_id"])] == ["EXECUTED"]  # the tool ran once
    assert provider.rejections == []


def test_9_still_too_long_after_trimming_fails_clearly(requester, provider, stream):
    provider.enqueue(shapes.http_400_context_length_exceeded(), shapes.http_400_context_length_exceeded())

    body = chat(requester, "hello")

    assert body["status"] == "FAILED" and body["error"]["code"] == "MODEL_CONTEXT_TOO_LONG"
    assert "retried once with the memory trimmed" in body["error"]["message"]
    assert "maximum context length" in body["error"]["message"]
    assert len(provider.requests) == 2


# -- 10. one deadline per model call ----------------------------------------------------------------------------

def test_10_a_dripping_stream_is_abandoned_at_the_deadline(requester, provider, settings):
    settings.LLM_STREAM = True
    settings.LLM_DEADLINE_SECONDS = 1.0
    provider.enqueue(turn_response(stream=True, content="I will now cancel the order for you",
                                   calls=[{"id": "call_slow_001", "name": "cancel_order",
                                           "arguments": json.dumps(CANCEL)}], interval_seconds=0.3))

    started = time.monotonic()
    body = chat(requester, f"cancel {ORDER}")
    elapsed = time.monotonic() - started

    assert elapsed < 3.0, elapsed  # the stream would take 2.4 s more; every read was quick
    assert body["status"] == "FAILED" and body["error"]["code"] == "MODEL_TIMEOUT"
    assert body["error"]["retryable"] is True
    assert "LLM_DEADLINE_SECONDS=1" in body["error"]["message"]
    run = Run.objects.get(pk=body["run_id"])
    assert run.error_code == "MODEL_TIMEOUT"
    assert not ConfirmationRequest.objects.exists() and audit_of(run.pk) == []
    assert len(provider.requests) == 1


def test_10_a_slow_answer_is_abandoned_at_the_deadline(requester, provider, settings):
    settings.LLM_STREAM = False
    settings.LLM_DEADLINE_SECONDS = 1.0
    provider.enqueue(shapes.slow_answer(content="late", delay_seconds=2.5))

    started = time.monotonic()
    body = chat(requester, "hello")

    assert time.monotonic() - started < 2.2
    assert body["status"] == "FAILED" and body["error"]["code"] == "MODEL_TIMEOUT"


def test_10_retries_stay_within_the_deadline(requester, provider, settings):
    settings.LLM_DEADLINE_SECONDS = 1.0
    for _ in range(3):
        provider.enqueue(shapes.error_response(503, "overloaded", type="server_error",
                                               headers={"retry-after": "0.7"}))

    started = time.monotonic()
    body = chat(requester, "hello")

    assert time.monotonic() - started < 1.5
    assert body["status"] == "FAILED" and body["error"]["code"] in ("MODEL_UNAVAILABLE", "MODEL_TIMEOUT")
    assert len(provider.requests) == 2  # a third attempt would start after the deadline


# -- 11. a call of the conversation still waiting -----------------------------------------------------------------

def test_11_the_model_is_told_what_waits_and_a_claim_of_it_is_not_shown_as_fact(requester, provider, stream, confirm):
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "call_cancel01", "name": "cancel_order",
                                                          "arguments": json.dumps(CANCEL)}]))
    waiting = chat(requester, f"cancel {ORDER}")
    assert waiting["status"] == "AWAITING_CONFIRMATION"
    provider.enqueue(turn_response(stream=stream, content=f"Done: order {ORDER} has been cancelled."))

    body = chat(requester, "is it done?", waiting["conversation_id"])

    # the model's request carried a system note naming the waiting call
    system = sent(provider, 1)[0]
    assert system["role"] == "system" and "NOT been carried out" in system["content"]
    assert ORDER in system["content"] and waiting["pending"][0]["confirmation_id"] in system["content"]
    assert [m["role"] for m in sent(provider, 1)].count("system") == 1
    # the answer shown carries the platform's notice
    assert body["status"] == "COMPLETED"
    assert body["answer"].startswith(f"Done: order {ORDER} has been cancelled.")
    assert "[Not done yet]" in body["answer"] and "waiting for the user's confirmation" in body["answer"]
    run = Run.objects.get(pk=body["run_id"])
    [final] = run.events.filter(type=RunEvent.Type.FINAL_TEXT)
    assert final.payload["text"] == body["answer"]
    assert Message.objects.filter(run=run, role="assistant").get().content == body["answer"]
    # nothing ran
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    assert not AuditEvent.objects.filter(decision="EXECUTED").exists()

    # once the call is decided and done, answers carry no notice
    provider.enqueue(turn_response(stream=stream, content="Cancelled."))
    confirm(requester, waiting["pending"][0]["token"])
    resumed = Run.objects.get(pk=waiting["run_id"])
    assert resumed.final_answer == "Cancelled."
    assert "NOT been carried out" not in sent(provider, 2)[0]["content"]
    assert provider.rejections == []


# -- the same kinds, on the other paths ---------------------------------------------------------------------------

def test_1_calls_streamed_without_index_are_kept_apart(requester, provider, settings):
    settings.LLM_STREAM = True  # Ollama / llama.cpp: each call whole in its own chunk, no `index`
    provider.enqueue(shapes.calls_without_index([
        {"id": "call_a", "name": "query_inventory", "arguments": INVENTORY},
        {"id": "call_b", "name": "list_orders", "arguments": {"status": "PAID"}}]))
    provider.enqueue(turn_response(stream=True, content="Done."))

    body = chat(requester, "stock and paid orders")

    assert body["status"] == "COMPLETED"
    assert [(c["id"], c["function"]["name"]) for c in assistant_calls(sent(provider, 1))] == [
        ("call_a", "query_inventory"), ("call_b", "list_orders")]
    assert sorted(a.tool_call_id for a in audit_of(body["run_id"]) if a.decision == "EXECUTED") == ["call_a", "call_b"]


@pytest.mark.parametrize(("shape", "parks"), [(shapes.http_401_invalid_key, False),
                                              (lambda: shapes.error_response(503, "overloaded", type="server_error",
                                                                             headers={"retry-after-ms": "5"}), True)],
                         ids=["401-fails-at-once", "503-parks"])
def test_7_a_resume_task_parks_only_on_retryable_model_failures(requester, provider, settings, shape, parks):
    from agentplatform.runtime import claims
    from agentplatform.runtime.outcome import RunParked
    from approvals import requester_actions
    from tests.tools.support import resume_not_enqueued

    settings.LLM_STREAM = False
    provider.enqueue(turn_response(stream=False, calls=[{"id": "call_cancel01", "name": "cancel_order",
                                                         "arguments": json.dumps(CANCEL)}]))
    waiting = chat(requester, f"cancel {ORDER}")
    with resume_not_enqueued():
        requester_actions.confirmation_confirm(token=waiting["pending"][0]["token"], user=requester)
    provider.enqueue(shape(), shape(), shape())

    if parks:
        with pytest.raises(RunParked):
            claims.run_resume(run_id=waiting["run_id"], park_on_model_error=True)
    else:
        claims.run_resume(run_id=waiting["run_id"], park_on_model_error=True)

    run = Run.objects.get(pk=waiting["run_id"])
    # the confirmed call ran once before the model was called, whatever the model did next
    assert Cancellation.objects.count() == 1
    if parks:
        assert (run.status, run.lease_expires_at) == (Run.Status.RUNNING, None)
        assert len(provider.requests) == 1 + 3
    else:
        assert (run.status, run.error_code) == (Run.Status.FAILED, "MODEL_AUTH_FAILED")
        assert len(provider.requests) == 1 + 1


def test_11_a_run_resumed_after_its_gated_call_is_told_about_another_call_still_waiting(requester, provider, stream,
                                                                                         confirm):
    # run A waits for the cancellation of ORDER; run B, same conversation, waits for OTHER_ORDER's
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "call_cancel_a", "name": "cancel_order",
                                                          "arguments": json.dumps(CANCEL)}]))
    first = chat(requester, f"cancel {ORDER}")
    provider.enqueue(turn_response(stream=stream, calls=[{"id": "call_cancel_b", "name": "cancel_order",
                                                          "arguments": json.dumps(CANCEL_OTHER)}]))
    second = chat(requester, f"and cancel {OTHER_ORDER}", first["conversation_id"])
    provider.enqueue(turn_response(stream=stream, content="Both orders are cancelled."))

    confirm(requester, second["pending"][0]["token"])  # run B resumes; run A still waits

    system = sent(provider, 2)[0]["content"]
    assert "NOT been carried out" in system and first["pending"][0]["confirmation_id"] in system
    assert second["pending"][0]["confirmation_id"] not in system  # B's own call has run
    run_b = Run.objects.get(pk=second["run_id"])
    assert run_b.final_answer.startswith("Both orders are cancelled.") and "[Not done yet]" in run_b.final_answer
    assert ORDER in run_b.final_answer.split("[Not done yet]")[1]
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    assert Order.objects.get(tenant=requester.tenant, order_id=OTHER_ORDER).status == Order.Status.CANCELLED
    assert [a.tool_call_id for a in AuditEvent.objects.filter(decision="EXECUTED")] == ["call_cancel_b"]
    assert provider.rejections == []
