"""URL configuration."""
from django.contrib import admin
from django.urls import include, path

from agentplatform.ops.health import healthz, readyz
from agentplatform.ops.metrics import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),  # liveness
    path("readyz", readyz, name="readyz"),  # readiness: database, migrations, broker
    path("metrics", metrics_view, name="metrics"),  # Prometheus (METRICS_TOKEN / METRICS_ALLOWED_NETWORKS)
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),  # set_language: the admin's language switch
    path("api/", include("agentplatform.api.urls")),  # REST API /api/v1/, schema, docs
    path("approvals/", include("approvals.urls")),
    path("", include("agentplatform.web.urls")),  # /, /chat/, product login/logout (before auth urls)
    path("accounts/", include("django.contrib.auth.urls")),
]

# Under /api/ the error body ({"code": "SERVER_ERROR", ...}, request id logged); Django's page elsewhere.
handler500 = "agentplatform.api.errors.server_error"
# Under /api/ the error body for what Django refuses before any view (a disallowed Host header).
handler400 = "agentplatform.api.errors.bad_request"
