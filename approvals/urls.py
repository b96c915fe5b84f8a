"""URLs of the approver dashboard, mounted at /approvals/ (namespace `approvals`)."""
from django.urls import path

from approvals import decision_views, overview_views, requester_views, views

app_name = "approvals"

urlpatterns = [
    path("", views.pending, name="pending"),
    path("history/", views.history, name="history"),
    path("mine/", views.mine, name="mine"),
    # The requester's page of one request (an MCP "pending" answer's url): before the routes below.
    path("mine/<uuid:request_id>/", requester_views.mine_detail, name="mine-detail"),
    path("mine/<uuid:request_id>/confirm/", requester_views.mine_confirm, name="mine-confirm"),
    path("mine/<uuid:request_id>/cancel/", requester_views.mine_cancel, name="mine-cancel"),
    path("mine/<str:request_id>/withdraw/", decision_views.withdraw, name="withdraw"),
    path("live/", views.live, name="live"),
    path("overview/", overview_views.overview, name="overview"),  # approval quality: administrators, auditors
    path("<uuid:request_id>/", views.detail, name="detail"),
    path("<str:request_id>/approve/", decision_views.approve, name="approve"),
    path("<str:request_id>/reject/", decision_views.reject, name="reject"),
    path("<str:request_id>/edit/", decision_views.edit, name="edit"),
    path("<str:request_id>/respond/", decision_views.respond, name="respond"),
    path("<str:request_id>/claim/", views.claim, name="claim"),
    path("<str:request_id>/release/", views.release, name="release"),
]
