"""URLs of the auditor's pages, mounted at /audit/ (namespace `auditor`)."""
from django.urls import path

from agentplatform.web.auditor import views

app_name = "auditor"

urlpatterns = [
    path("", views.trail, name="trail"),
    path("export.<str:fmt>", views.export, name="export"),
    path("verify/", views.verify, name="verify"),
    path("conversations/<uuid:conversation_id>/", views.conversation, name="conversation"),
    path("runs/<uuid:run_id>/", views.run, name="run"),
]
