"""Tag search: the most used tags and the jobs carrying one tag."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.forms import TagForm, first_error
from django_qless.views.base import client_for, dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row, load_jobs

__all__ = ["tag_detail", "tags"]


@dashboard_view()
def tags(request: HttpRequest) -> HttpResponse:
    """Show the top tags; a ``?tag=`` search goes to that tag's page."""
    query = request.GET.get("tag")
    if query is not None:
        form = TagForm({"tag": query})
        if form.is_valid():
            return HttpResponseRedirect(qurl(request, "tag", form.cleaned_data["tag"]))
        messages.error(request, first_error(form))
    client = client_for(request)
    top = list(client.tags.top(offset=0, count=100))
    return render_page(request, "django_qless/tags.html", {"top": top, "tag_query": query or ""},
                       title="Tags", crumbs=[("Tags", None)])


@dashboard_view()
def tag_detail(request: HttpRequest, tag: str) -> HttpResponse:
    """List the jobs with one tag, paginated."""
    client = client_for(request)
    pager = get_pager(request)
    found = client.jobs.tagged(tag, offset=pager.offset, count=pager.per_page)
    total = int(found.get("total", 0))
    pager = pager.with_rows(0, total)
    now = float(client.now())
    rows = [job_row(job, now) for job in load_jobs(client, found.get("jobs") or [])]
    return render_page(request, "django_qless/tag.html",
                       {"tag": tag, "rows": rows, "pager": pager, "total": total,
                        "tag_query": tag},
                       title=f"Tag {tag}", crumbs=[("Tags", qurl(request, "tags")), (tag, None)])
