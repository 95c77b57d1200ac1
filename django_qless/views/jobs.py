"""The job page and every action on one job (POST, then redirect with a message)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import DependencyError, InvalidArgument, LimitExceeded
from django_qless.core.job import Job
from django_qless.forms import MoveForm, PriorityForm, TagForm, UndependForm, first_error
from django_qless.options import RESULT_KEY
from django_qless.views import data
from django_qless.views.base import (
    counted,
    dashboard_view,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.job_state import MOVABLE, PRIORITY_STATES, job_version
from django_qless.views.shards import deployment, find_job

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = [
    "job_cancel",
    "job_detail",
    "job_move",
    "job_priority",
    "job_retry",
    "job_tag",
    "job_timeout",
    "job_track",
    "job_undepend",
    "job_untag",
    "job_untrack",
]

STANDARD_EVENTS = {"put", "popped", "done", "failed", "timed-out", "throttled", "retry"}
DATA_OPEN_BYTES = 16 * 1024  # job data larger than this starts collapsed on the job page
PRIORITY_PRESETS = (("high", 25), ("normal", 0), ("low", -25))


def get_job(request: HttpRequest, jid: str) -> Job:
    """Return the job from whichever shard holds it, or raise JobNotFound (a 404); what is
    done with it goes to its own shard (`job.client`)."""
    return find_job(request, jid)


def _history(job: Job) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split history into the timeline and the worker's log entries."""
    timeline: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []
    for entry in job.history or []:
        if not isinstance(entry, dict):
            continue
        extra = {k: v for k, v in entry.items() if k not in ("when", "what")}
        item = {"when": entry.get("when"), "what": str(entry.get("what", "")), "extra": extra}
        (timeline if item["what"] in STANDARD_EVENTS else logs).append(item)
    return timeline, logs


def _result(job: Job) -> Any:
    payload = job.data if isinstance(job.data, dict) else {}
    return payload.get(RESULT_KEY)


@dashboard_view()
def job_detail(request: HttpRequest, jid: str) -> HttpResponse:
    """Show everything about one job, with the actions the user may take."""
    job = get_job(request, jid)
    client = job.client
    now = float(client.now())
    timeline, logs = _history(job)
    failure = job.failure if isinstance(job.failure, dict) and job.failure else None
    context = {
        "job": data.job_row(job, now),
        "raw_data": job.raw_data,
        # Large data starts collapsed (a 900 KB payload would bury the rest of the page).
        "data_bytes": len(job.raw_data.encode("utf-8")),
        "data_collapsed": len(job.raw_data) > DATA_OPEN_BYTES,
        "result": _result(job),
        "timeline": timeline,
        "logs": logs,
        "failure": failure,
        "dependencies": sorted(job.dependencies or []),
        "dependents": sorted(job.dependents or []),
        "spawned_from": job.spawned_from,
        "flow_id": _flow_id(job),
        "throttles": list(job.throttles or ()),
        # A job moves within its shard: the queues offered are that shard's.
        "queues": client.queues.names(),
        "job_shard": client.shard,
        "presets": PRIORITY_PRESETS,
        "live_src": qurl(request, "api_job_summary", jid),
        "live_version": job_version(job),
        "live_page": qurl(request, "job", jid),
        "can_prioritize": job.state in PRIORITY_STATES,
        "can_move": job.state in MOVABLE,
    }
    return render_page(request, "django_qless/job.html", context, title=f"Job {jid}",
                       crumbs=[("Jobs", None), (jid, None)])


def _flow_id(job: Job) -> str | None:
    """Return the id of the flow the job is a member of (None outside any flow)."""
    from django_qless.core.flows import flow_of, member_ids

    flow_id = (flow_of(job) or {}).get("id")
    try:
        return flow_id if isinstance(flow_id, str) and member_ids(flow_id) else None
    except InvalidArgument:
        return None


def _back(request: HttpRequest, jid: str) -> HttpResponse:
    return redirect_back(request, qurl(request, "job", jid))


MAX_CASCADE = 500  # like the bulk actions: one request cancels at most this many jobs


def _dependents_text(jids: list[str]) -> str:
    shown = ", ".join(jids[:5]) + (", …" if len(jids) > 5 else "")
    return f"{counted(len(jids), 'job')} depend{'s' if len(jids) == 1 else ''} on it ({shown})"


def _closure(job: Job) -> tuple[list[str], str | None]:
    """Return the job's transitive dependents, or [] and why they cannot all be canceled."""
    try:
        return job.client.jobs.dependents_closure(job.jid, MAX_CASCADE), None
    except LimitExceeded:
        return [], (f"More than {MAX_CASCADE} jobs depend on this job: cancel some of them "
                    "first.")


@dashboard_view(manage=True)
def job_cancel(request: HttpRequest, jid: str) -> HttpResponse:
    """Ask for confirmation (GET), then cancel the job, or it and its dependents (POST)."""
    job = get_job(request, jid)
    here = qurl(request, "job_cancel", jid)
    if request.method != "POST":
        dependents, too_many = _closure(job) if job.dependents else ([], None)
        context: dict[str, Any] = {
            "action": here, "button": "Yes, cancel the job", "back": qurl(request, "job", jid),
            "question": f"Cancel job {jid} ({job.klass_name})? It is deleted with its history."}
        if too_many:
            context.update(question=too_many, button="")
        elif dependents:
            context.update(
                question=f"Job {jid} ({job.klass_name}) can't be canceled on its own: "
                         f"{_dependents_text(dependents)}. Cancel it together with every job "
                         "that depends on it? They are all deleted with their history.",
                details=dependents, hidden=[("with_dependents", "1")],
                button=f"Yes, cancel it and its {counted(len(dependents), 'dependent')}")
        return render_page(request, "django_qless/confirm.html", context, title="Cancel job",
                           crumbs=[(jid, qurl(request, "job", jid)), ("Cancel", None)])
    queue = job.queue_name
    if request.POST.get("with_dependents"):
        try:
            canceled = job.client.jobs.cancel_with_dependents(jid, MAX_CASCADE)
        except DependencyError:
            messages.error(request, "More jobs started to depend on this one meanwhile: "
                                    "nothing was canceled. Check the new list and confirm again.")
            return redirect_back(request, here)
        others = len(canceled) - 1
        messages.success(request, f"Canceled job {jid} and {others} job"
                                  f"{'s' if others != 1 else ''} depending on it.")
    else:
        try:
            job.cancel()
        except DependencyError:
            dependents, too_many = _closure(job)
            messages.error(request, too_many or (
                f"This job can't be canceled on its own: {_dependents_text(dependents)}. "
                "Use “Cancel with its dependents” to cancel them all."))
            return redirect_back(request, here, use_referer=True)
        messages.success(request, f"Canceled job {jid}.")
    if queue:
        return redirect_back(request, qurl(request, "queue", queue))
    return redirect_back(request, qurl(request, "overview"))


def _not_in_a_queue(job: Job, done: str) -> str:
    """Say why a job outside every queue (a completed one) is not requeued or moved."""
    if job.state == "complete":
        return (f"Job {job.jid} is complete: it already ran, and a completed job is kept only "
                f"as a record, in no queue, so it can't be {done}. To run it again, enqueue a "
                f"new job.")
    return f"Job {job.jid} is {job.state}: it is in no queue, so it can't be {done}."


@dashboard_view(post_only=True)
def job_retry(request: HttpRequest, jid: str) -> HttpResponse:
    """Put the job back into its queue now (retry a failed job, requeue any other)."""
    job = get_job(request, jid)
    if not job.queue_name or job.state not in MOVABLE:
        messages.error(request, _not_in_a_queue(job, "requeued"))
        return _back(request, jid)
    job.move(job.queue_name)
    messages.success(request, f"Requeued job {jid} into {job.queue_name}.")
    return _back(request, jid)


@dashboard_view(post_only=True)
def job_move(request: HttpRequest, jid: str) -> HttpResponse:
    """Move the job to another queue (an existing one, or a valid new name)."""
    job = get_job(request, jid)
    if job.state not in MOVABLE:
        messages.error(request, _not_in_a_queue(job, "moved"))
        return _back(request, jid)
    form = MoveForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return _back(request, jid)
    queue = form.cleaned_data["queue"]
    dep = deployment(request)
    home = dep.shard_of(queue) if isinstance(dep, ShardedClient) else None
    if home is not None and home != job.client.shard:
        # The engine moves a job within its keyspace; the queue lives in another shard.
        messages.error(request, f"Queue {queue} lives in shard {home}, job {jid} in "
                                f"shard {job.client.shard}: a job moves within its shard.")
        return _back(request, jid)
    job.move(queue)
    messages.success(request, f"Moved job {jid} to {queue}.")
    return _back(request, jid)


@dashboard_view(post_only=True)
def job_priority(request: HttpRequest, jid: str) -> HttpResponse:
    """Change the job's priority (presets or a free integer)."""
    job = get_job(request, jid)
    if job.state not in PRIORITY_STATES:
        messages.error(request, f"Job {jid} is {job.state}: a priority only orders jobs that "
                                "are still waiting to run, so it was not changed.")
        return _back(request, jid)
    form = PriorityForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return _back(request, jid)
    if form.cleaned_data["priority"] == job.priority:
        messages.info(request, f"Priority of {jid} is already {job.priority}: nothing changed.")
        return _back(request, jid)
    job.set_priority(form.cleaned_data["priority"])
    messages.success(request, f"Priority of {jid} is now {form.cleaned_data['priority']}.")
    return _back(request, jid)


@dashboard_view(post_only=True)
def job_track(request: HttpRequest, jid: str) -> HttpResponse:
    """Track the job."""
    job = get_job(request, jid)
    if job.tracked:
        messages.info(request, f"Job {jid} is already tracked.")
        return _back(request, jid)
    job.track()
    messages.success(request, f"Tracking job {jid}.")
    return _back(request, jid)


@dashboard_view(post_only=True)
def job_untrack(request: HttpRequest, jid: str) -> HttpResponse:
    """Stop tracking the job."""
    job = get_job(request, jid)
    if not job.tracked:
        messages.info(request, f"Job {jid} is not tracked: nothing to stop.")
        return _back(request, jid)
    job.untrack()
    messages.success(request, f"Stopped tracking job {jid}.")
    return _back(request, jid)


def _change_tag(request: HttpRequest, jid: str, *, add: bool) -> HttpResponse:
    """Add or remove one tag named in the POSTed form."""
    job = get_job(request, jid)
    form = TagForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return _back(request, jid)
    tag = form.cleaned_data["tag"]
    if add and tag in job.tags:
        messages.info(request, f"Job {jid} already has tag {tag}.")
    elif add:
        job.tag(tag)
        messages.success(request, f"Tagged {jid} with {tag}.")
    elif tag not in job.tags:
        messages.info(request, f"Job {jid} has no tag {tag}: nothing to remove.")
    else:
        job.untag(tag)
        messages.success(request, f"Removed tag {tag} from {jid}.")
    return _back(request, jid)


@dashboard_view(post_only=True)
def job_tag(request: HttpRequest, jid: str) -> HttpResponse:
    """Add a tag."""
    return _change_tag(request, jid, add=True)


@dashboard_view(post_only=True)
def job_untag(request: HttpRequest, jid: str) -> HttpResponse:
    """Remove a tag."""
    return _change_tag(request, jid, add=False)


@dashboard_view(post_only=True)
def job_timeout(request: HttpRequest, jid: str) -> HttpResponse:
    """Time out a running job: its worker loses the lock and the job is retried."""
    job = get_job(request, jid)
    if job.state != "running":
        messages.error(request, f"Job {jid} is {job.state}, not running: nothing to time out.")
        return _back(request, jid)
    job.timeout()
    messages.success(request, f"Timed out job {jid}.")
    return _back(request, jid)


@dashboard_view(post_only=True)
def job_undepend(request: HttpRequest, jid: str) -> HttpResponse:
    """Remove one dependency of a job."""
    job = get_job(request, jid)
    form = UndependForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return _back(request, jid)
    if form.cleaned_data["dependency"] not in job.dependencies:
        messages.info(request, f"Job {jid} does not wait for {form.cleaned_data['dependency']}: "
                               "nothing to remove.")
        return _back(request, jid)
    job.undepend(form.cleaned_data["dependency"])
    messages.success(request, f"Job {jid} no longer waits for {form.cleaned_data['dependency']}.")
    return _back(request, jid)
