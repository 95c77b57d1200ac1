"""URLs: the demo pages, the admin and the qless dashboard."""

from importlib.util import find_spec

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("demo.urls")),
]

# The dashboard's URLconf ships with django_qless; guard the include while it is being built.
if find_spec("django_qless.urls") is not None:
    urlpatterns.insert(0, path("qless/", include("django_qless.urls")))
