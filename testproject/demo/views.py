"""Views that enqueue @job tasks (inside transactions: jobs go out on commit)."""

from __future__ import annotations

import os

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from demo import jobs
from demo.models import Report
from django_qless import get_client


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """List reports and queue counts."""
    try:
        counts = get_client().queues.counts
    except Exception as exc:  # noqa: BLE001 - the page still renders without Redis
        counts = [{"name": f"Redis unavailable: {exc}"}]
    return render(request, "demo/index.html",
                  {"reports": Report.objects.all()[:20], "counts": counts})


@require_POST
def start_pipeline(request: HttpRequest) -> HttpResponse:
    """Create a report and its job graph in one transaction."""
    images = max(1, min(10, int(request.POST.get("images", 3) or 3)))
    with transaction.atomic():
        report = Report.objects.create(title=request.POST.get("title") or "Weekly report",
                                       images=images)
        thumbs = [jobs.make_thumbnail.enqueue(report.pk, i) for i in range(images)]
        built = jobs.build_report.using(depends=[t.jid for t in thumbs]).enqueue(report.pk)
        jobs.email_report.using(depends=[built.jid], track=True).enqueue(report.pk)
    return redirect("demo:index")


@require_POST
def start_failing(request: HttpRequest) -> HttpResponse:
    """Enqueue a job that fails after its retries."""
    jobs.flaky_upload.enqueue(request.POST.get("name") or "cat.png")
    return redirect("demo:index")


@require_GET
def instance(request: HttpRequest) -> HttpResponse:
    """Return the token `make demo` gave this server, so it knows it reached its own one."""
    return HttpResponse(os.environ.get("DEMO_INSTANCE", ""), content_type="text/plain")


@require_GET
def smoke(request: HttpRequest) -> JsonResponse:
    """Enqueue the smoke job and return its jid."""
    handle = jobs.smoke.enqueue(21)
    return JsonResponse({"jid": handle.jid})


@require_GET
def job_status(request: HttpRequest, jid: str) -> JsonResponse:
    """Return a job's state (and result once complete)."""
    found = get_client().jobs.get(jid)
    if found is None:
        return JsonResponse({"jid": jid, "state": None}, status=404)
    data = found.data if isinstance(found.data, dict) else {}
    return JsonResponse({"jid": jid, "state": found.state, "result": data.get("result")})
