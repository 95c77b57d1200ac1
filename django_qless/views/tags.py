"""Tag search: the most used tags and the jobs carrying one tag."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.core.console.tag_counts import tag_counts
from django_qless.forms import TagForm, first_error
from django_qless.views.base import dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row, load_jobs
from django_qless.views.live_blocks import live_block
from django_qless.views.shards import merge_counts, page_clients

__all__ = ["tag_detail", "tags", "top_tags_counted"]


@dashboard_view()
def tags(request: HttpRequest) -> HttpResponse:
    """Show the top tags; a ``?tag=`` search goes to that tag's page."""
    query = request.GET.get("tag")
    if query is not None:
        form = TagForm({"tag": query})
        if form.is_valid():
            return HttpResponseRedirect(qurl(request, "tag", form.cleaned_data["tag"]))
        messages.error(request, first_error(form))
    shown = top_tags_counted(page_clients(request))
    rows = [(tag, shown["counts"].get(tag, 0)) for tag in shown["tags"]]
    return render_page(request, "django_qless/tags.html",
                       {"top": rows, "tag_query": query or "",
                        **live_block(request, "api_tags", shown)},
                       title="Tags", crumbs=[("Tags", None)])


def top_tags_counted(clients: list[Any]) -> dict[str, Any]:
    """Return the most used tags, most used first, and how many jobs carry each."""
    top = top_tags(clients)
    counts = merge_counts(tag_counts(client, top) for client in clients)
    return {"tags": top, "counts": {tag: counts.get(tag, 0) for tag in top}}


@dashboard_view()
def tag_detail(request: HttpRequest, tag: str) -> HttpResponse:
    """List the jobs with one tag, paginated."""
    from django_qless.shard_reads import tagged

    clients = page_clients(request)
    pager = get_pager(request)
    found = tagged(clients, tag, pager.offset, pager.per_page)
    total = int(found.get("total") or 0)
    pager = pager.with_rows(0, total)
    now = float(clients[0].now())
    rows = [job_row(job, now) for job in load_jobs(clients, found.get("jobs") or [])]
    return render_page(request, "django_qless/tag.html",
                       {"tag": tag, "rows": rows, "pager": pager, "total": total,
                        "tag_query": tag,
                        "live_src": qurl(request, "api_tag", tag, query={
                            k: v for k, v in request.GET.items() if k in ("page", "shard")})},
                       title=f"Tag {tag}", crumbs=[("Tags", qurl(request, "tags")), (tag, None)])


def top_tags(clients: list[Any]) -> list[str]:
    """Return the 100 most used tags of every shard (merged rank by rank)."""
    if len(clients) == 1:
        return list(clients[0].tags.top(offset=0, count=100))
    return _merged_top([list(c.tags.top(offset=0, count=100)) for c in clients])


def _merged_top(tops: list[list[str]], count: int = 100) -> list[str]:
    """Merge the shards' most-used tags rank by rank (the engine gives no counts with them):
    every shard's first, then every shard's second, and so on."""
    merged: list[str] = []
    for rank in range(max((len(t) for t in tops), default=0)):
        for top in tops:
            if rank < len(top) and top[rank] not in merged:
                merged.append(top[rank])
    return merged[:count]
