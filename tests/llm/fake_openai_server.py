"""A local HTTP server that speaks OpenAI's chat-completions protocol from a script.

Tests of the real SDK path (the same code with a real endpoint as with the offline model) point `openai.OpenAI(base_url=server.url)` here.
A test enqueues responses in order, each either a JSON body with a status code or a list of SSE
chunks to stream (optionally dropping the connection part-way), and afterwards inspects the
requests the server received. Builders below produce payloads shaped like OpenAI's own.

    server = FakeOpenAIServer().start()
    server.enqueue(sse_response([chunk({"role": "assistant", "content": "Hi"}), chunk({}, "stop")]))
    ...
    server.stop()
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPLETION_ID = "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"
CREATED = 1741570283
MODEL = "gpt-4o-mini-2024-07-18"
FINGERPRINT = "fp_06737a9306"


@dataclass
class ScriptedResponse:
    """One scripted answer. Either `body` (JSON, sent with Content-Length) or `sse` (streamed).

    sse: chunk dicts (sent as `data: {json}`) or raw strings (sent as `data: {str}`), each flushed as
    its own HTTP chunk. done: append `data: [DONE]`. drop_after: close the socket after that many
    SSE events without finishing the chunked body (a provider dropping the connection).
    """

    status: int = 200
    body: Any = None
    sse: list[dict[str, Any] | str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    done: bool = True
    drop_after: int | None = None
    delay_seconds: float = 0.0  # before the status line (a slow provider)
    interval_seconds: float = 0.0  # between SSE events (a stream that drips)
    # A stream that stops after `hold_after` events until the test sets `hold` (a provider stalling
    # mid-answer for as long as the test needs, without guessing a duration); 120 s at most.
    hold: threading.Event | None = None
    hold_after: int = 1


@dataclass
class RecordedRequest:
    """What the server received: method, path, headers (lower-case names) and the parsed JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


# -- payload builders (shapes copied from real OpenAI responses) ----------------------------------

def chunk(delta: dict[str, Any], finish_reason: str | None = None, *, index: int = 0) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    return {"id": COMPLETION_ID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL,
            "service_tier": "default", "system_fingerprint": FINGERPRINT,
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def tool_delta(index: int, *, id: str | None = None, name: str | None = None, arguments: str = "") -> dict[str, Any]:
    """A delta carrying one tool-call fragment; id/name only on the first fragment of an index."""
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        fragment.update(id=id, type="function")
    if name is not None:
        fragment["function"]["name"] = name
    return {"tool_calls": [fragment]}


def usage_chunk(prompt: int = 82, completion: int = 17) -> dict[str, Any]:
    """The trailing usage chunk sent with `stream_options.include_usage` (no choices)."""
    return {"id": COMPLETION_ID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL,
            "system_fingerprint": FINGERPRINT, "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def completion(*, content: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
               finish_reason: str = "stop") -> dict[str, Any]:
    """A non-streaming `chat.completion` body."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": COMPLETION_ID, "object": "chat.completion", "created": CREATED, "model": MODEL,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
                      "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                    "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}},
            "service_tier": "default", "system_fingerprint": FINGERPRINT}


def function_call(id: str, name: str, arguments: str) -> dict[str, Any]:
    """One complete tool call as it appears in a non-streaming message."""
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> ScriptedResponse:
    """A JSON answer (e.g. a `completion(...)` body) with a status code and extra headers."""
    return ScriptedResponse(status=status, body=body, headers=dict(headers or {}))


def sse_response(chunks: list[dict[str, Any] | str], *, done: bool = True, drop_after: int | None = None,
                 headers: dict[str, str] | None = None, interval_seconds: float = 0.0) -> ScriptedResponse:
    """A streamed answer: `chunks` as SSE events, then `[DONE]` unless done=False; see ScriptedResponse."""
    return ScriptedResponse(sse=list(chunks), done=done, drop_after=drop_after, headers=dict(headers or {}),
                            interval_seconds=interval_seconds)


def error_response(status: int, message: str, *, type: str, code: str | None = None,
                   headers: dict[str, str] | None = None) -> ScriptedResponse:
    """An error in OpenAI's format, e.g. 429 rate_limit_exceeded or 500 server_error."""
    body = {"error": {"message": message, "type": type, "param": None, "code": code}}
    return ScriptedResponse(status=status, body=body, headers=dict(headers or {}))


# -- the server -----------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked transfer, like real providers
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            pass  # the client hung up (e.g. closed its keep-alive connection); nothing to answer

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        owner = self.server.owner
        with owner._lock:
            owner.requests.append(RecordedRequest(self.command, self.path,
                                                  {k.lower(): v for k, v in self.headers.items()}, body))
            scripted = owner._script.pop(0) if owner._script else None
        problem = validate_request(body, owner.strict) if owner.strict and self.command == "POST" else ""
        if problem:
            with owner._lock:
                owner.rejections.append(problem)
                if scripted is not None:
                    owner._script.insert(0, scripted)  # the script answers the next, valid request
            scripted = error_response(400, problem, type="invalid_request_error", code="invalid_request",
                                      headers={"x-should-retry": "false"})
        if scripted is None:
            scripted = error_response(500, "FakeOpenAIServer: no scripted response left", type="server_error",
                                      headers={"x-should-retry": "false"})
        if scripted.delay_seconds:
            time.sleep(scripted.delay_seconds)
        if scripted.sse is None:
            self._send_json(scripted)
        else:
            self._send_sse(scripted)

    def _send_json(self, scripted: ScriptedResponse) -> None:
        payload = json.dumps(scripted.body).encode()
        self.send_response(scripted.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("x-request-id", "req_fake0123456789")
        for name, value in scripted.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_sse(self, scripted: ScriptedResponse) -> None:
        self.send_response(scripted.status)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        for name, value in scripted.headers.items():
            self.send_header(name, value)
        self.end_headers()
        events = [e if isinstance(e, str) else json.dumps(e) for e in scripted.sse or ()]
        if scripted.done:
            events.append("[DONE]")
        for number, event in enumerate(events):
            if scripted.drop_after is not None and number >= scripted.drop_after:
                self.wfile.flush()
                self.close_connection = True
                self.connection.close()  # no terminating zero-length chunk: an incomplete body
                return
            if number and scripted.interval_seconds:
                time.sleep(scripted.interval_seconds)
            if scripted.hold is not None and number == scripted.hold_after:
                scripted.hold.wait(timeout=120)
            data = f"data: {event}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "FakeOpenAIServer"


class FakeOpenAIServer:
    """A scripted chat-completions server on 127.0.0.1 (random port), served from a thread.

    url: the base URL to give the SDK (`http://127.0.0.1:PORT/v1`). enqueue(*responses): append
    ScriptedResponses, answered one per request in order; with the script empty it answers 500
    (with `x-should-retry: false`). requests: the RecordedRequests received, in order.
    strict: validate every request like a strict provider (`validate_request`); a request that
    fails is answered 400 with the reason (also appended to `rejections`) and does not consume
    the script.
    """

    def __init__(self, *, strict: str | None = None) -> None:
        self.strict = strict  # None, "openai" or "deepseek": see validate_request
        self.rejections: list[str] = []
        self.requests: list[RecordedRequest] = []
        self._script: list[ScriptedResponse] = []
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def enqueue(self, *responses: ScriptedResponse) -> None:
        with self._lock:
            self._script.extend(responses)

    def start(self) -> "FakeOpenAIServer":
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- a strict provider's request validation --------------------------------------------------------

def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def validate_request(body: Any, mode: str = "openai") -> str:
    """Why a strict provider would answer 400 to this chat-completions request ("" if it accepts it).

    The rules OpenAI's API enforces on a replayed history (mode "openai"): every assistant tool call
    has a non-empty id unique within its message, type "function", a name, and arguments that are
    a string holding a JSON object; the calls of an assistant message are answered by the tool
    messages right after it, each id exactly once; a tool message answers a call of the assistant
    message before it; no text holds U+0000. Mode "deepseek" adds DeepSeek's thinking-mode rule:
    an assistant message with tool calls after the last user message carries `reasoning_content`.
    """
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return "'messages' must be a non-empty array"
    messages = body["messages"]
    if _has_nul(messages):
        return "Invalid 'messages': text must not contain the NUL character"
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    open_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid 'messages[{i}].role': {role!r}"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not call_id or call_id not in open_ids:
                return (f"Invalid parameter: messages with role 'tool' must be a response to a preceding message "
                        f"with 'tool_calls' (messages[{i}].tool_call_id={call_id!r})")
            open_ids.discard(call_id)
            continue
        if open_ids:
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(open_ids)}")
        if role != "assistant" or not message.get("tool_calls"):
            continue
        seen: set[str] = set()
        for j, call in enumerate(message["tool_calls"]):
            where = f"messages[{i}].tool_calls[{j}]"
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                return f"Invalid '{where}.id': empty string"
            if call_id in seen:
                return f"Invalid '{where}.id': duplicate tool call id {call_id!r} in one message"
            seen.add(call_id)
            function = call.get("function") or {}
            if call.get("type") != "function" or not function.get("name"):
                return f"Invalid '{where}': a function tool call needs type 'function' and a name"
            arguments = function.get("arguments")
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else None
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                return f"Invalid '{where}.function.arguments': must be a string holding a JSON object"
        if mode == "deepseek" and i > last_user and not message.get("reasoning_content"):
            return f"Missing `reasoning_content` field in the assistant message at message index {i}"
        open_ids = seen
    if open_ids:
        return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(open_ids)}")
    return ""


# -- provider shapes (docs/providers.md): each a named builder, streamed and not ----------------
#
# A call is a dict {"id", "name", "arguments", "index"}; a key left out is left out on the wire
# too, and "arguments" may be any JSON value (some providers send an object). docs/providers.md
# lists which provider sends which shape and where the platform normalises it.

def _halves(text: str) -> list[str]:
    half = max(len(text) // 2, 1)
    return [text[:half], text[half:]] if len(text) > 1 else [text]


def turn_response(*, stream: bool, content: str | None = None, calls: list[dict[str, Any]] = (),
                  finish_reason: str | None = None, reasoning: str | None = None,
                  interval_seconds: float = 0.0) -> ScriptedResponse:
    """One assistant turn, as SSE chunks (stream=True: reasoning, text and each call's arguments
    split in two fragments, calls by `index`) or as one `chat.completion` body."""
    finish = finish_reason or ("tool_calls" if calls else "stop")
    if not stream:
        body = completion(content=content, finish_reason=finish)
        message = body["choices"][0]["message"]
        if calls:
            message["tool_calls"] = []
            for call in calls:
                wire: dict[str, Any] = {"type": "function", "function": {}}
                if "id" in call:
                    wire["id"] = call["id"]
                if "name" in call:
                    wire["function"]["name"] = call["name"]
                if "arguments" in call:
                    wire["function"]["arguments"] = call["arguments"]
                message["tool_calls"].append(wire)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        return json_response(body)
    chunks: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": None if reasoning else ""})]
    for piece in _halves(reasoning) if reasoning else ():
        chunks.append(chunk({"content": None, "reasoning_content": piece}))
    for piece in _halves(content) if content else ():
        chunks.append(chunk({"content": piece}))
    for position, call in enumerate(calls):
        index = call.get("index", position)
        arguments = call.get("arguments", "")
        pieces = _halves(arguments) if isinstance(arguments, str) and arguments else [arguments]
        for number, piece in enumerate(pieces):
            # a call without "arguments" is sent without the field (some servers omit it)
            fragment: dict[str, Any] = {"function": {"arguments": piece} if "arguments" in call else {}}
            if index is not None:
                fragment["index"] = index
            if number == 0:
                fragment["type"] = "function"
                if "id" in call:
                    fragment["id"] = call["id"]
                if "name" in call:
                    fragment["function"]["name"] = call["name"]
            chunks.append(chunk({"tool_calls": [fragment]}))
    chunks.append(chunk({}, finish))
    chunks.append(usage_chunk())
    return sse_response(chunks, interval_seconds=interval_seconds)


def kimi_duplicate_ids(*, stream: bool, name: str, arguments: list[dict[str, Any]],
                       call_id: str | None = "functions.cancel_order:0") -> ScriptedResponse:
    """Kimi (Moonshot) style: several calls in one turn sharing one id (`functions.NAME:0`); with
    call_id=None the calls carry no id at all (llama.cpp, some vLLM parsers)."""
    calls = [{"name": name, "arguments": json.dumps(a)} | ({"id": call_id} if call_id is not None else {})
             for a in arguments]
    return turn_response(stream=stream, calls=calls)


def phantom_entry(*, stream: bool, name: str, arguments: dict[str, Any]) -> ScriptedResponse:
    """One real call at index 0 and, at index 1, an entry with an empty id, no name and no arguments
    (seen from vLLM/Qwen parsers and LM Studio)."""
    return turn_response(stream=stream, calls=[{"id": "call_real0001", "name": name, "arguments": json.dumps(arguments)},
                                               {"id": "", "arguments": ""}])


def object_arguments(*, stream: bool, name: str, arguments: dict[str, Any]) -> ScriptedResponse:
    """GLM (Zhipu) / Ollama style: `arguments` sent as a JSON object instead of a string."""
    return turn_response(stream=stream, calls=[{"id": "call_glm_0001", "name": name, "arguments": arguments}])


def nul_in_arguments(*, stream: bool, name: str, arguments: dict[str, Any]) -> ScriptedResponse:
    """Arguments whose JSON text escapes U+0000 (the arguments dict holds "\\x00" somewhere)."""
    return turn_response(stream=stream, calls=[{"id": "call_nul_0001", "name": name,
                                                "arguments": json.dumps(arguments)}])


def truncated_arguments(*, stream: bool, name: str, partial: str) -> ScriptedResponse:
    """A turn cut by `finish_reason: "length"` in the middle of a call's arguments."""
    return turn_response(stream=stream, finish_reason="length",
                         calls=[{"id": "call_cut_0001", "name": name, "arguments": partial}])


def deepseek_reasoning_call(*, stream: bool, name: str, arguments: dict[str, Any], reasoning: str) -> ScriptedResponse:
    """DeepSeek thinking mode: `reasoning_content` beside the tool call; DeepSeek answers 400 when it
    is missing from the replayed assistant message of the same turn (validate_request "deepseek")."""
    return turn_response(stream=stream, reasoning=reasoning,
                         calls=[{"id": "call_ds_0001", "name": name, "arguments": json.dumps(arguments)}])


def empty_arguments(*, stream: bool, name: str, arguments: Any, call_id: str = "call_glm_empty1") -> ScriptedResponse:
    """GLM (Zhipu) style: a call whose arguments say nothing: `arguments` is "" (GLM), whitespace,
    None (`"arguments": null`), "null", or ABSENT (no arguments field at all)."""
    call: dict[str, Any] = {"id": call_id, "name": name}
    if arguments is not ABSENT:
        call["arguments"] = arguments
    return turn_response(stream=stream, calls=[call])


ABSENT = object()  # empty_arguments(arguments=ABSENT): the call has no "arguments" field

REPEAT_SHAPES = ("second_finish", "no_finish", "id_on_first_only", "name_only", "new_index")


def repeated_call(*, stream: bool, call_id: str, name: str, arguments: str, shape: str = "second_finish",
                  split: bool = True) -> ScriptedResponse:
    """A call the provider sends twice whole (docs/providers.md, "a call repeated whole").

    Streamed: the call's fragments at index 0 (`arguments` in two halves, or whole with
    split=False), a first finishing chunk, then the repeat, by `shape`:
    "second_finish": a second finishing chunk repeating the whole call (same index, id, name and
    the complete arguments); "no_finish": the repeat in a chunk without finish_reason, before the
    only finishing chunk; "id_on_first_only": the repeat carries neither id nor name;
    "name_only": the repeat names the function again but carries no id; "new_index": the repeat
    at index 1 with the same id and name. Not streamed: two identical entries in `tool_calls`.
    """
    assert shape in REPEAT_SHAPES, shape
    if not stream:
        return turn_response(stream=False, calls=[{"id": call_id, "name": name, "arguments": arguments}] * 2)
    pieces = _halves(arguments) if split else [arguments]
    chunks: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": None})]
    chunks.append(chunk(tool_delta(0, id=call_id, name=name, arguments=pieces[0])))
    chunks += [chunk(tool_delta(0, arguments=piece)) for piece in pieces[1:]]
    repeat = {"second_finish": tool_delta(0, id=call_id, name=name, arguments=arguments),
              "no_finish": tool_delta(0, id=call_id, name=name, arguments=arguments),
              "id_on_first_only": tool_delta(0, arguments=arguments),
              "name_only": tool_delta(0, name=name, arguments=arguments),
              "new_index": tool_delta(1, id=call_id, name=name, arguments=arguments)}[shape]
    if shape == "no_finish":
        chunks += [chunk(repeat), chunk({}, "tool_calls")]
    else:
        chunks += [chunk({}, "tool_calls"), chunk(repeat, "tool_calls")]
    chunks.append(usage_chunk())
    return sse_response(chunks)


def calls_without_index(calls: list[dict[str, Any]]) -> ScriptedResponse:
    """Streamed only (Ollama / some llama.cpp builds): each call whole in its own chunk, no `index`."""
    return turn_response(stream=True, calls=[{**c, "index": None, "arguments": json.dumps(c["arguments"])}
                                             for c in calls])


def slow_drip(*, text: str, interval_seconds: float) -> ScriptedResponse:
    """A stream that sends one small text chunk every `interval_seconds` (each read is quick)."""
    chunks: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": c}) for c in text]
    chunks.append(chunk({}, "stop"))
    return sse_response(chunks, interval_seconds=interval_seconds)


def slow_answer(*, content: str, delay_seconds: float) -> ScriptedResponse:
    """A non-streamed answer that starts after `delay_seconds`."""
    return ScriptedResponse(status=200, body=completion(content=content), delay_seconds=delay_seconds)


# Provider failures, with the bodies the providers send.
def http_401_invalid_key() -> ScriptedResponse:
    return error_response(401, "Incorrect API key provided: sk-test-4f1c9a1b2c3d4e5f. You can find your API key at "
                               "https://platform.openai.com/account/api-keys.", type="invalid_request_error",
                          code="invalid_api_key")


def http_403_forbidden() -> ScriptedResponse:
    return error_response(403, "Project proj_Xyz123 does not have access to model gpt-4o-mini",
                          type="invalid_request_error", code="model_not_found")


def http_404_model_not_found(model: str = "gpt-4o-mini") -> ScriptedResponse:
    return error_response(404, f"The model `{model}` does not exist or you do not have access to it.",
                          type="invalid_request_error", code="model_not_found")


def http_400_rejected() -> ScriptedResponse:
    return error_response(400, "Invalid schema for function 'cancel_order': 'reason' is not valid under any of the "
                               "given schemas.", type="invalid_request_error", code="invalid_function_parameters")


def http_429_request_too_large() -> ScriptedResponse:
    return error_response(429, "Request too large for gpt-4o-mini in organization org-abc on tokens per min (TPM): "
                               "Limit 30000, Requested 48211. The input or output tokens must be reduced in order to "
                               "run successfully.", type="tokens", code="rate_limit_exceeded",
                          headers={"retry-after-ms": "10"})


def http_429_insufficient_quota() -> ScriptedResponse:
    return error_response(429, "You exceeded your current quota, please check your plan and billing details.",
                          type="insufficient_quota", code="insufficient_quota", headers={"retry-after-ms": "10"})


def http_402_insufficient_balance() -> ScriptedResponse:
    """DeepSeek: an account without credit answers 402."""
    return error_response(402, "Insufficient Balance", type="unknown_error", code="invalid_request_error")


# OpenAI's real rate-limit message (it mentions billing, and is still only a rate limit).
RATE_LIMIT_MESSAGE = ("Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): Limit 3, "
                      "Used 3, Requested 1. Please try again in 20s. Visit https://platform.openai.com/account/"
                      "rate-limits to learn more. You can increase your rate limit by adding a payment method to your "
                      "account at https://platform.openai.com/account/billing.")


def http_400_context_length_exceeded() -> ScriptedResponse:
    return error_response(400, "This model's maximum context length is 128000 tokens. However, your messages resulted "
                               "in 131072 tokens. Please reduce the length of the messages.",
                          type="invalid_request_error", code="context_length_exceeded")
