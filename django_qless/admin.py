"""Mount the queue dashboard inside the Django admin (an entry on the index, no table)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, include, path

from django_qless.models import Dashboard
from django_qless.views.base import VIEW_PERM, user_of
from django_qless.views.overview import overview

__all__ = ["DashboardAdmin"]


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Serve every dashboard page under ``/admin/django_qless/dashboard/``."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        user = user_of(request)
        return bool(user.is_active and user.is_staff and user.has_perm(VIEW_PERM))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def _wrap(self, view: Any) -> Any:
        site = self.admin_site

        def with_site(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            request.qless_admin_site = site  # type: ignore[attr-defined]
            response: HttpResponse = view(request, *args, **kwargs)
            return response

        return site.admin_view(with_site)

    def get_urls(self) -> list[URLResolver | URLPattern]:  # type: ignore[override]
        from django_qless.urls import get_urlpatterns

        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [
            path("", self._wrap(overview), name=name),
            path("", include((get_urlpatterns(wrap=self._wrap), "django_qless"))),
        ]
