"""URLs of the people's pages: `/`, `/chat/`, and sign-in/out with the product's templates.

Mounted before `django.contrib.auth.urls`, so these login/logout routes win; the rest of the auth
URLs (password change/reset) still come from Django.
"""
from django.contrib.auth import views as auth_views
from django.urls import include, path

from agentplatform.web import views

urlpatterns = [
    path("", views.home, name="home"),
    path("chat/", views.chat, name="chat"),
    path("audit/", include("agentplatform.web.auditor.urls")),  # the auditor's pages (namespace auditor)
    path("accounts/login/", views.SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
]
