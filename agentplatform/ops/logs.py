"""Structured logs: one JSON object per line, carrying the correlation fields
of the request or task that wrote it, and never a token or secret.

- `RequestContextMiddleware` takes the request id from `X-Request-ID` (when it is a plain token of
  up to 64 characters) or makes one, echoes it in the response's `X-Request-ID`, binds it (and the
  session user) to `core.correlation`, and writes one access line per request (path
  without its query string, status, duration in ms).
- `CorrelationFilter` adds request_id, tenant, user_id, run_id, conversation_id, tool and
  tool_call_id (those known) to every record.
- `RedactingFilter` replaces confirmation tokens, API tokens in Authorization headers, bearer
  values, password-reset link tokens and the configured secrets (SECRET_KEY, LLM_API_KEY) in the
  message, its arguments and every `extra=` field; a request object (Django's request logger) is
  logged as its method and path only, never its query string.
- `JsonFormatter` is python-json-logger's, with the field names operators expect.

LOG_FORMAT=json (default) or text; LOG_LEVEL sets the root level (WARNING), LOG_ACCESS=1 (default)
writes the access lines at INFO on the `agentplatform.access` logger.
"""
from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any, Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

from core import correlation
from core.redaction.endpoints import scrub_urls
from core.redaction.text import LOG_RECORD_ATTRIBUTES

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")
access_logger = logging.getLogger("agentplatform.access")

# Anything shaped like a credential, whatever logger it goes through: (pattern, replacement).
_SECRET_PATTERNS = [
    (re.compile(r"\bct_[A-Za-z0-9_\-]{16,}"), "[redacted]"),  # confirmation tokens (approvals TOKEN_PATTERN)
    (re.compile(r"(?i)\b(token|bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]{20,}"), r"\1\2[redacted]"),  # Authorization
    (re.compile(r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',&}]{8,}"),
     r"\1[redacted]"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "[redacted]"),  # OpenAI-style keys
    # The token of a password-reset link (django.contrib.auth: /reset/<uidb64>/<token>/): whoever
    # reads it can set the account's password.
    (re.compile(r"(/reset/[A-Za-z0-9_\-]+/)(?!set-password/)[A-Za-z0-9]+-[A-Za-z0-9]+/"), r"\1[redacted]/"),
]


def loggable_request(request: Any) -> str:
    """What a log line may say about an HttpRequest: its method and path, redacted, without the
    query string (which may carry anything a client put there: tokens, keys, phone numbers)."""
    return redact(f"{getattr(request, 'method', '')} {getattr(request, 'path', '')}".strip())


def incoming_request_id(value: str | None) -> str:
    """The client's X-Request-ID when it is a plain token (A-Z a-z 0-9 . _ : -, 1-64), else ""."""
    value = (value or "").strip()
    return value if REQUEST_ID_PATTERN.fullmatch(value) else ""


def redact(text: str) -> str:
    """`text` with every credential-shaped substring and the configured secrets replaced by
    "[redacted]", and every URL without its userinfo, query and fragment (an MCP SDK's or httpx's
    line names the URL it called; core.redaction.endpoints)."""
    text = scrub_urls(text)
    for secret in _configured_secrets():
        text = text.replace(secret, "[redacted]")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _configured_secrets() -> list[str]:
    values = [getattr(settings, "SECRET_KEY", ""), getattr(settings, "LLM_API_KEY", ""),
              getattr(settings, "METRICS_TOKEN", "")]
    return [v for v in values if isinstance(v, str) and len(v) >= 8]


class CorrelationFilter(logging.Filter):
    """Adds the current correlation fields (core.correlation.log_fields) to a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in correlation.log_fields().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class RedactingFilter(logging.Filter):
    """Formats the record's message once, redacted (see `redact`), and drops its arguments; the
    text of an exception is redacted when the formatter renders it (JsonFormatter/TextFormatter)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record still logs, as its raw template
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        for name, value in list(vars(record).items()):
            if name in LOG_RECORD_ATTRIBUTES:
                continue
            if isinstance(value, HttpRequest) or (name == "request" and not isinstance(value, str)):
                # Django's request logger passes the request itself; its repr has the query string.
                setattr(record, name, loggable_request(value))
            elif isinstance(value, str):
                setattr(record, name, redact(value))
        return True


class JsonFormatter(_BaseJsonFormatter):
    """python-json-logger with `time`, `level`, `logger`, `message`, the correlation fields and any
    `extra=`; exception text redacted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"})
        kwargs.setdefault("timestamp", False)
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", *args, **kwargs)

    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        return redact(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return redact(super().formatStack(stack_info))


class TextFormatter(logging.Formatter):
    """Plain text (LOG_FORMAT=text), correlation fields appended as key=value; exceptions redacted."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(f"{name}={getattr(record, name)}" for name in (*correlation.FIELDS, "run_id")
                          if getattr(record, name, None))
        return f"{line} {extras}" if extras else line

    def formatException(self, ei) -> str:  # noqa: N802
        return redact(super().formatException(ei))


class RequestContextMiddleware:
    """Binds the request id (X-Request-ID or a new one) and the user to the correlation context,
    echoes `X-Request-ID`, and writes one access log line. Sync and async capable."""

    sync_capable = True
    async_capable = False  # Django adapts it; the streams' bodies are async, the views are sync

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        correlation.clear()
        rid = incoming_request_id(request.headers.get("X-Request-ID")) or uuid.uuid4().hex
        request.request_id = rid  # type: ignore[attr-defined]
        token = correlation.bind(request_id=rid)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = rid
            if settings.LOG_ACCESS:
                user = getattr(request, "user", None)
                if user is not None and getattr(user, "is_authenticated", False):
                    correlation.bind(user_id=user.pk, tenant=getattr(user, "tenant_id", None))
                access_logger.info("%s %s %s", request.method, request.path, response.status_code, extra={
                    "method": request.method, "path": request.path, "status": response.status_code,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2)})
            return response
        finally:
            correlation.reset(token)


def logging_config(*, fmt: str, level: str, access: bool) -> dict[str, Any]:
    """The LOGGING dict for settings: one console handler with the correlation and redaction
    filters and the JSON (or text) formatter."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "correlation": {"()": "agentplatform.ops.logs.CorrelationFilter"},
            "redact": {"()": "agentplatform.ops.logs.RedactingFilter"},
            # The masking every other exit applies (phones, card numbers, ...; core.redaction.text).
            "mask": {"()": "core.redaction.text.MaskingFilter"},
        },
        "formatters": {
            "json": {"()": "agentplatform.ops.logs.JsonFormatter"},
            "text": {"()": "agentplatform.ops.logs.TextFormatter",
                     "format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": fmt,
                                 "filters": ["correlation", "mask", "redact"]}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "agentplatform.access": {"level": "INFO" if access else "WARNING"},
            # uvicorn's access line carries the query string; ours does not (and has the ids).
            "uvicorn.access": {"level": "WARNING"},
            "uvicorn.error": {"level": "INFO"},
            "gunicorn.error": {"level": "INFO"},
            # httpx names every URL it calls at INFO; a webhook relay's URL path may be a secret
            # (docs/notifications.md): its lines and httpcore's are kept to warnings. The runtime
            # uses httpx2 (requirements.txt); httpx comes with the development set.
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
            "httpx2": {"level": "WARNING"},
            "httpcore2": {"level": "WARNING"},
        },
    }
