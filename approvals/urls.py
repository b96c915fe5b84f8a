"""URLs of the approver dashboard, mounted at /approvals/ (namespace `approvals`)."""
from django.urls import path

from approvals import views

app_name = "approvals"

urlpatterns = [
    path("", views.pending, name="pending"),
    path("history/", views.history, name="history"),
    path("mine/", views.mine, name="mine"),
    path("mine/<str:request_id>/withdraw/", views.withdraw, name="withdraw"),
    path("live/", views.live, name="live"),
    path("<uuid:request_id>/", views.detail, name="detail"),
    path("<str:request_id>/approve/", views.approve, name="approve"),
    path("<str:request_id>/reject/", views.reject, name="reject"),
    path("<str:request_id>/edit/", views.edit, name="edit"),
    path("<str:request_id>/respond/", views.respond, name="respond"),
]
