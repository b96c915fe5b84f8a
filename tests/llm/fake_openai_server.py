"""A local HTTP server that speaks OpenAI's chat-completions protocol from a script.

Tests of the real SDK path (DESIGN section 6) point `openai.OpenAI(base_url=server.url)` here.
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
                 headers: dict[str, str] | None = None) -> ScriptedResponse:
    """A streamed answer: `chunks` as SSE events, then `[DONE]` unless done=False; see ScriptedResponse."""
    return ScriptedResponse(sse=list(chunks), done=done, drop_after=drop_after, headers=dict(headers or {}))


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
        if scripted is None:
            scripted = error_response(500, "FakeOpenAIServer: no scripted response left", type="server_error",
                                      headers={"x-should-retry": "false"})
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
    """

    def __init__(self) -> None:
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
