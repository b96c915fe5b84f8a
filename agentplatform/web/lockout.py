"""What a locked-out sign-in gets (django-axes' AXES_LOCKOUT_CALLABLE)."""
from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse


def lockout_response(request: HttpRequest, original_response, credentials) -> JsonResponse:
    """429 with the platform's error body and `Retry-After` (the cool-off, in seconds).

    django-axes has already recorded the attempt (AccessAttempt / AccessFailureLog, visible to
    platform operators in the admin); the lockout counts per username and per client IP.
    """
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response = JsonResponse({"code": "LOGIN_LOCKED_OUT", "retryable": True,
                             "message": f"too many failed sign-ins for this account or address; "
                                        f"try again in {seconds // 60} minutes"}, status=429)
    response["Retry-After"] = str(seconds)
    return response
