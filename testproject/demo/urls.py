"""Demo pages."""

from django.urls import path

from demo import views

app_name = "demo"
urlpatterns = [
    path("", views.index, name="index"),
    path("reports/new/", views.start_pipeline, name="start"),
    path("fail/", views.start_failing, name="fail"),
    path("smoke/", views.smoke, name="smoke"),
    path("instance/", views.instance, name="instance"),
    path("jobs/<str:jid>.json", views.job_status, name="job"),
]
