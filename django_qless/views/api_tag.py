"""JSON for the tag page's live refresh: one page of a tag's jobs and the total."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_qless.views.api import _json, _rows
from django_qless.views.base import api_view, get_pager
from django_qless.views.data import load_jobs
from django_qless.views.shards import page_clients

__all__ = ["api_tag"]


@api_view
def api_tag(request: HttpRequest, tag: str) -> HttpResponse:
    """One page (``?page=``) of the jobs carrying `tag`, with the total."""
    from django_qless.shard_reads import tagged

    clients = page_clients(request)
    pager = get_pager(request)
    found = tagged(clients, tag, pager.offset, pager.per_page)
    jobs = load_jobs(clients, found.get("jobs") or [])
    return _json({"jobs": _rows(clients, jobs), "total": int(found.get("total") or 0),
                  "page": pager.number})
