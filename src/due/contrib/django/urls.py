"""`path("jobs/", include("due.contrib.django.urls"))`: due's dashboard under
the site's URL, for staff users (views.py)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.urls import re_path

WEB_PACKAGES = frozenset({"starlette", "jinja2", "cron_descriptor"})
"""What the dashboard imports from due's `web` extra (which `due[django]` brings)."""

try:
    from due.contrib.django.views import dashboard
except ModuleNotFoundError as error:
    package = (error.name or "").split(".")[0]
    if package not in WEB_PACKAGES:
        raise
    raise ImproperlyConfigured(
        f"due's dashboard needs due's web extra ({package} is missing): "
        "pip install 'due[django,web]'"
    ) from error

app_name = "due"
urlpatterns = [
    re_path(r"^(?P<subpath>.*)$", dashboard, name="dashboard"),
]
