"""How the location of an outside service is written down: a URL, a command line, headers.

The platform calls MCP servers and webhook receivers at URLs an operator registered, and starts
stdio MCP servers as commands. Those often carry a secret: `https://mcp.example.com/mcp?api_key=…`,
`https://user:password@host/`, `--token=…` in a command's arguments, `Authorization` among the
headers. Everything that records such a location (audit rows a tenant administrator reads and
exports, logs, run events, error messages, admin pages of roles that may not read credentials)
writes it through this module:

- a URL as scheme, host, port and path; its userinfo, query and fragment only as a keyed digest
  (`safe_url`, `url_record`); `keep_path=False` drops the path too, where the path itself is the
  secret (an incoming-webhook URL of a chat relay);
- a command line (command and arguments) only as a keyed digest (`command_line_digest`);
- headers and environment variables by name only (`names`), never a value;
- free text (an exception message, a log line) with every URL in it made safe (`scrub_urls`).

The digests are HMAC-SHA256 keyed with the platform's SECRET_KEY (`django.utils.crypto.salted_hmac`),
cut to 16 hex digits: equal locations give equal digests (a change shows), and a short password in
a URL cannot be found by hashing guesses, which a plain SHA-256 would allow to anyone reading the
trail. Rotating SECRET_KEY changes every digest from then on. This module imports nothing of ours:
every app may use it.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable
from urllib.parse import urlsplit

from django.utils.crypto import salted_hmac

_SALT = "core.redaction.endpoints"
# A URL in free text: a scheme, "://", then anything up to whitespace or a quote/bracket.
# A userinfo (up to an "@" before the first "/") is taken whole even with a quote in it, so a password
# like pa'ss in "for url 'https://u:pa'ss@host/'" is not cut at its quote and left in the text.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]{0,15}://(?:[^\s/?#@]*@)?[^\s\"'<>`]+")
# A path segment that looks like a credential rather than a name: 16 or more characters of a
# token's alphabet with both a letter and a digit ("/mcp/sk-ak-3f9…/sse", a webhook's key, a UUID),
# or one that still carries a percent-encoded "?", "=", "@" or ":" (a query or userinfo hidden in the path).
_SECRET_SEGMENT = re.compile(r"(?=[^/]*[A-Za-z])(?=[^/]*\d)[A-Za-z0-9_\-.~%+=]{16,}|[^/]*%(?:3[FfDdAa]|40)[^/]*")


def digest(value: str) -> str:
    """A keyed digest (16 hex digits) of `value`: equal for equal values, unguessable without SECRET_KEY."""
    return salted_hmac(_SALT, value, algorithm="sha256").hexdigest()[:16]


def url_record(url: str, *, keep_path: bool = True) -> dict[str, str]:
    """What may be recorded of `url`: {"url": "scheme://host[:port]/path", "url_rest_digest": "<16
    hex>" or "" when the URL has no userinfo, query, fragment or path parameters (nor, with
    keep_path=False, a path)}. A path segment that looks like a credential (`_SECRET_SEGMENT`) is
    written "{redacted}" and counts as the rest.
    A URL that does not parse is recorded by digest only ({"url": "", "url_rest_digest": ...})."""
    url = str(url or "").strip()
    if not url:
        return {"url": "", "url_rest_digest": ""}
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return {"url": "", "url_rest_digest": digest(url)}
    if not parts.scheme or not host or "%" in host:  # a percent-encoded host hides a userinfo
        return {"url": "", "url_rest_digest": digest(url)}
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    base = f"{parts.scheme.lower()}://{host}{f':{port}' if port is not None else ''}"
    rest = [parts.username or "", parts.password or "", parts.query, parts.fragment]
    path, _, params = parts.path.partition(";")  # path parameters (";jsessionid=…"): not the path
    rest.append(params)
    if keep_path:
        shown = _SECRET_SEGMENT.sub("{redacted}", path)
        rest.append(path if shown != path else "")
        base += shown
    else:
        rest.append(parts.path if parts.path not in ("", "/") else "")
    secret = any(rest) or "@" in parts.netloc
    return {"url": base, "url_rest_digest": digest(url) if secret else ""}


def safe_url(url: str, *, keep_path: bool = True) -> str:
    """`url` as one string fit for any reader: "https://host:port/path", followed by
    " [redacted <digest>]" when userinfo, a query or a fragment (or, with keep_path=False, a path)
    was left out. "" for an empty URL."""
    record = url_record(url, keep_path=keep_path)
    if not record["url"] and not record["url_rest_digest"]:
        return ""
    if not record["url"]:
        return f"[unparseable URL, redacted {record['url_rest_digest']}]"
    return record["url"] + (f" [redacted {record['url_rest_digest']}]" if record["url_rest_digest"] else "")


def command_line_digest(command: str, args: Iterable[str] = ()) -> str:
    """A keyed digest of a command and its arguments ("" when there is no command): what is
    recorded of a stdio server's command line, whose arguments may carry a token."""
    if not command:
        return ""
    return digest(json.dumps([str(command), *[str(a) for a in args or ()]], ensure_ascii=False))


def names(mapping: Any) -> list[str]:
    """The keys of a headers or environment mapping, sorted: never a value."""
    return sorted(str(k) for k in mapping) if isinstance(mapping, dict) else []


def scrub_urls(text: str) -> str:
    """`text` with every URL in it that carries userinfo, a query or a fragment replaced by its
    `safe_url` (an httpx error or an SDK's log line names the URL it called, query included).
    Non-str is returned unchanged."""
    if not isinstance(text, str) or "://" not in text:
        return text

    def one(match: re.Match) -> str:
        found = match.group(0)
        trail = ""
        while found and found[-1] in ".,;:)]}":  # sentence punctuation after a URL is not part of it
            trail, found = found[-1] + trail, found[:-1]
        record = url_record(found)
        if not record["url_rest_digest"]:
            return match.group(0)
        return safe_url(found) + trail

    return _URL_IN_TEXT.sub(one, text)


# Audit rows written before these rules recorded an MCP server's location as typed (its URL, its
# command and arguments, its OAuth client id: agentplatform.controlplane.receivers' snapshot).
def _legacy_snapshot(values: Any) -> Any:
    """`values` (an old/new snapshot) unchanged when it records nothing as typed, else a copy as
    rows are written now."""
    if not isinstance(values, dict):
        return values
    typed_url = any(isinstance(values.get(k), str) and url_record(values[k])["url_rest_digest"]
                    for k in ("url", "oauth_token_url"))
    if not typed_url and not any(k in values for k in ("command", "args", "oauth_client_id")):
        return values
    shown = dict(values)
    for key in ("url", "oauth_token_url"):
        if isinstance(shown.get(key), str):
            shown[key] = safe_url(shown[key])
    if "command" in shown:
        shown["command_line_digest"] = command_line_digest(str(shown.pop("command") or ""),
                                                           shown.get("args") if isinstance(shown.get("args"), list) else ())
    if "args" in shown:
        shown["args_digest"] = digest(json.dumps(shown.pop("args"), ensure_ascii=False, default=str))
    if "oauth_client_id" in shown:
        value = shown.pop("oauth_client_id")
        shown["oauth_client_id_digest"] = digest(str(value)) if value else ""
    return shown


def recorded_event_shown(masked_arguments: Any, message: str) -> tuple[Any, str]:
    """An audit row's (masked_arguments, message) as any reader may see them: every URL in them
    without userinfo, query and fragment (`scrub_urls`), and an MCP server's location as recorded
    by rows written before these rules (its URL as typed, its command and arguments, its OAuth
    client id) shown as the rows written now record it. The row itself is never changed (the trail
    is append-only); exports, the audit API and the audit admin show it through this."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return scrub_urls(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    if isinstance(masked_arguments, dict) and (masked_arguments.get("object") or {}).get("type") == "mcp_server":
        old, new = _legacy_snapshot(masked_arguments.get("old")), _legacy_snapshot(masked_arguments.get("new"))
        if old is not masked_arguments.get("old") or new is not masked_arguments.get("new"):
            masked_arguments = {**masked_arguments, "old": old, "new": new}
            ident = masked_arguments["object"].get("id", "")
            if isinstance(old, dict) and isinstance(new, dict):  # a CHANGED row: its summary named the values
                message = f"mcp_server {ident} changed: " + ", ".join(
                    f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new)
    return walk(masked_arguments), scrub_urls(message)
