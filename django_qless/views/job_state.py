"""The job page's live fingerprint: a few hundred bytes that change whenever the page would."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_qless.core.job import Job
from django_qless.views.base import api_view
from django_qless.views.shards import find_job

__all__ = ["MOVABLE", "PRIORITY_STATES", "api_job_summary", "job_summary", "job_version"]

# A priority orders a job among those still to be popped; the engine re-scores only these.
PRIORITY_STATES = ("waiting", "scheduled", "depends", "stalled", "throttled")
# A completed job is out of every queue: moving it would run it again, which is a new job.
MOVABLE = ("waiting", "scheduled", "depends", "stalled", "throttled", "running", "failed")


def job_version(job: Job) -> str:
    """Digest everything the job page shows, so any change is seen without sending it."""
    shown = [
        job.jid, job.klass_name, job.state, job.queue_name, job.worker_name, job.priority,
        job.expires_at, job.retries, job.original_retries, bool(job.tracked),
        list(job.tags or ()), list(job.throttles or ()), job.spawned_from, job.failure or None,
        sorted(job.dependencies or []), sorted(job.dependents or []), job.history or [],
    ]
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode("utf-8"))
    # The data may be megabytes: it goes into the digest without a copy.
    digest.update(b"\0")
    digest.update(job.raw_data.encode("utf-8"))
    return digest.hexdigest()[:32]


def job_summary(job: Job) -> dict[str, Any]:
    """Return the small fields the live poll sends (bounded by the engine's name limits)."""
    return {
        "jid": job.jid,
        "state": job.state,
        "queue": job.queue_name or "",
        "worker": job.worker_name or "",
        "priority": job.priority,
        "expires": job.expires_at,
        "tracked": bool(job.tracked),
        "history_count": len(job.history or []),
        "version": job_version(job),
    }


@api_view
def api_job_summary(request: HttpRequest, jid: str) -> HttpResponse:
    """A job's state, queue, worker, priority and a version of the whole page (under 2 KB)."""
    return JsonResponse(job_summary(find_job(request, jid)))
