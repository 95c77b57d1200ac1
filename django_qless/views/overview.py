"""The overview page: queues, failure groups, tracked jobs, workers, throughput."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_qless.views import data
from django_qless.views.base import dashboard_view, get_pager, qurl, render_page
from django_qless.views.chart_scale import y_scale
from django_qless.views.shards import page_clients

__all__ = ["QUEUES_PER_PAGE", "overview"]

QUEUES_PER_PAGE = 50


@dashboard_view()
def overview(request: HttpRequest) -> HttpResponse:
    """Show every queue's counts and the health of the whole system (every shard's, or the
    ``?shard=`` one's)."""
    info = data.overview(page_clients(request))
    per_minute = info["completed_per_minute"]
    peak = max(per_minute) if per_minute else 0
    scale = y_scale(peak, 42, room=12)  # a round top, labelled like the Charts page's
    heights = [0 if n == 0 else max(1, round(n / scale["top"] * 30)) for n in per_minute]
    spark = [{"x": i * 6, "y": 42 - h, "h": h, "value": n}
             for i, (n, h) in enumerate(zip(per_minute, heights, strict=True))]
    pager = get_pager(request, total=len(info["queues"]), per_page=QUEUES_PER_PAGE)
    live_src = qurl(request, "api_overview", query={k: v for k, v in request.GET.items()
                                                    if k == "shard"})
    info.update(spark=spark, spark_peak=peak, spark_scale=scale, live_src=live_src,
                pager=pager, all_queues=len(info["queues"]),
                queues=info["queues"][pager.offset:pager.offset + pager.per_page],
                limit=data.OVERVIEW_LIMIT)
    return render_page(request, "django_qless/overview.html", info, title="Queues")
