"""URLs for the test settings: the admin, and the dashboard once its module exists."""

from importlib.util import find_spec

from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls)]

if find_spec("django_qless.urls") is not None:
    urlpatterns.append(path("qless/", include("django_qless.urls")))
