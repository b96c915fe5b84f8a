"""The admin speaks the administrator's language; every other page keeps the site's language.

Django's LocaleMiddleware would translate every response, the API's error messages included. Here
only pages under the admin (`/admin/`) follow the person: the language they chose with the admin's
language switch (Django's `set_language` view, remembered in the `django_language` cookie), else
their browser's Accept-Language, among settings.LANGUAGES (English, Simplified Chinese). The API,
its errors and the product pages (bilingual inline) answer in settings.LANGUAGE_CODE as before.
"""
from __future__ import annotations

from typing import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import translation
from django.utils.cache import patch_vary_headers


class AdminLanguageMiddleware:
    """Activate the person's language for admin pages only (place it after SessionMiddleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(reverse("admin:index")):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = translation.get_language()
            return self.get_response(request)
        language = translation.get_language_from_request(request)
        translation.activate(language)
        request.LANGUAGE_CODE = translation.get_language()
        response = self.get_response(request)
        patch_vary_headers(response, ("Accept-Language", "Cookie"))
        response.headers.setdefault("Content-Language", request.LANGUAGE_CODE)
        return response
