"""Reports in the admin."""

from django.contrib import admin

from demo.models import Report


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    """Read-mostly list of reports."""

    list_display = ("title", "status", "images", "created", "finished")
