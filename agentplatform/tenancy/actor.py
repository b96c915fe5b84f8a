"""Who is changing the control plane right now, for the control-plane audit (docs/roles.md).

The middleware puts the current HttpRequest in a context variable; `current_actor()` reads its
`user` when an audit row is written, so a DRF-authenticated user (DRF sets the underlying
request's `user` after authenticating) is seen as well as a session user. Code outside a request
(shell, management commands, Celery) may name the actor with `acting_as(user)`; without it the row
has no actor and says so.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Callable, Iterator

_request: ContextVar[Any] = ContextVar("control_plane_request", default=None)
_actor: ContextVar[Any] = ContextVar("control_plane_actor", default=None)
_channel: ContextVar[str | None] = ContextVar("control_plane_channel", default=None)


def current_actor() -> Any:
    """The user acting now: `acting_as(...)` first, else the request's authenticated user, else None."""
    actor = _actor.get()
    if actor is not None:
        return actor
    request = _request.get()
    user = getattr(request, "user", None) if request is not None else None
    return user if user is not None and getattr(user, "is_authenticated", False) else None


@contextlib.contextmanager
def acting_as(user: Any) -> Iterator[None]:
    """Attribute the control-plane changes made inside the block to `user` (shell, commands, seeds)."""
    token = _actor.set(user)
    try:
        yield
    finally:
        _actor.reset(token)


@contextlib.contextmanager
def acting_via(channel: str) -> Iterator[None]:
    """Name where the control-plane changes made inside the block come from when no user can be
    named (e.g. "shell (manage.py issue_api_token)": whoever has a shell on a server is an
    operator); the rows say it as their actor_role."""
    token = _channel.set(channel)
    try:
        yield
    finally:
        _channel.reset(token)


def current_channel() -> str | None:
    """The channel named by the innermost `acting_via` block, or None."""
    return _channel.get()


class ActorMiddleware:
    """Remember the request being served so control-plane audit rows name who made the change."""

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request):
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def current_request() -> Any:
    """The HttpRequest being served in this context (None outside a request)."""
    return _request.get()
