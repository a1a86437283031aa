"""`path("jobs/", include("due.contrib.django.urls"))`: due's dashboard under
the site's URL, for staff users (views.py)."""

from __future__ import annotations

from django.urls import re_path

from due.contrib.django.views import dashboard

app_name = "due"
urlpatterns = [
    re_path(r"^(?P<subpath>.*)$", dashboard, name="dashboard"),
]
