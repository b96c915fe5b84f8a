"""Cursor pagination that cannot lose or repeat rows.

DRF's CursorPagination encodes the position as the value of the *first* ordering field plus an
offset among rows sharing that value. When many rows share it (23 audit events written in the
same microsecond), following `previous` from a later page skips rows (issue 9, item 6: 16 of 21
came back). The position must therefore be a key that is unique within the paginated queryset.
Every cursor-paginated list of the API uses `UniqueKeyCursorPagination`, which states that key
and refuses (ImproperlyConfigured) an ordering on anything else; `tests/api/test_pagination.py`
checks every view's paginator.
"""
from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from rest_framework.pagination import CursorPagination


class UniqueKeyCursorPagination(CursorPagination):
    """Cursor pagination ordered on one unique key.

    ordering: a one-element tuple, the key ("-field" for descending). unique_within: the field the
    queryset is always filtered on when the key is unique only together with it (e.g. "tenant" for
    a per-tenant sequence), or "" when the key is unique on its own. Raises ImproperlyConfigured at
    the first page when the ordering is not such a key.
    """

    unique_within: str = ""

    def get_ordering(self, request, queryset, view):
        ordering = super().get_ordering(request, queryset, view)
        self.check_unique(queryset.model)
        return ordering

    @classmethod
    def check_unique(cls, model) -> None:
        """Raise ImproperlyConfigured unless `ordering` is one field that is unique in `model`
        (alone, or together with `unique_within` through a UniqueConstraint / unique_together)."""
        if len(cls.ordering) != 1 or not isinstance(cls.ordering, (tuple, list)):
            raise ImproperlyConfigured(f"{cls.__name__}.ordering must be one unique key, got {cls.ordering!r}")
        name = cls.ordering[0].lstrip("-")
        field = model._meta.get_field(name)
        if field.primary_key or field.unique:
            return
        wanted = {name, cls.unique_within} if cls.unique_within else {name}
        together = [set(c.fields) for c in model._meta.constraints if getattr(c, "fields", None)
                    and getattr(c, "condition", None) is None]
        together += [set(t) for t in model._meta.unique_together]
        if wanted in together:
            return
        raise ImproperlyConfigured(f"{cls.__name__} orders {model.__name__} on {name!r}, which is not unique"
                                   + (f" within {cls.unique_within!r}" if cls.unique_within else ""))
