"""Which webhook URLs the platform may call (docs/notifications.md, "Webhook URLs").

Only http(s) URLs with a host. By default a URL whose host is, or resolves to, a loopback,
private, link-local, multicast, reserved or unspecified address is refused, so a tenant's
webhook cannot be pointed at the platform's own network (server-side request forgery);
WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true allows them (a relay on the same host, tests). The check runs
when the endpoint is saved and again before every attempt (DNS may have changed since).
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError


def _blocked(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (address.is_private or address.is_loopback or address.is_link_local or address.is_multicast
            or address.is_reserved or address.is_unspecified or not address.is_global)


def addresses_of(host: str) -> list[str]:
    """The IP addresses `host` stands for (itself when it is an IP literal). Raises
    ValidationError(code WEBHOOK_URL_UNRESOLVABLE) when the name does not resolve."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValidationError(f"the host {host!r} does not resolve", code="WEBHOOK_URL_UNRESOLVABLE") from exc
    return sorted({info[4][0].split("%")[0] for info in infos})


def validate_webhook_url(url: str) -> None:
    """Refuse a webhook URL the platform must not call. Returns None; raises ValidationError with
    code WEBHOOK_URL_INVALID (not http/https, no host, credentials in it), WEBHOOK_URL_UNRESOLVABLE,
    or WEBHOOK_URL_PRIVATE (a loopback/private/reserved address while
    WEBHOOK_ALLOW_PRIVATE_ADDRESSES is false)."""
    parts = urlsplit(str(url or "").strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("a webhook URL must be http:// or https:// with a host", code="WEBHOOK_URL_INVALID")
    if parts.username or parts.password:
        raise ValidationError("a webhook URL must not carry credentials; the body is signed instead",
                              code="WEBHOOK_URL_INVALID")
    if settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        return
    host = parts.hostname
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
        raise ValidationError(f"the host {host!r} is local; set WEBHOOK_ALLOW_PRIVATE_ADDRESSES to allow it",
                              code="WEBHOOK_URL_PRIVATE")
    for address in addresses_of(host):
        if _blocked(ipaddress.ip_address(address)):
            raise ValidationError(
                f"the host {host!r} is (or resolves to) a private, loopback or reserved address ({address}); "
                "set WEBHOOK_ALLOW_PRIVATE_ADDRESSES to allow it", code="WEBHOOK_URL_PRIVATE")


def host_of(url: str) -> str:
    """The host of `url` only: what logs name (a relay's URL path may itself be a secret)."""
    return urlsplit(str(url)).hostname or "?"
