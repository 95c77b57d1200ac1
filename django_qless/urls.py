"""URLs of the queue dashboard: ``path("qless/", include("django_qless.urls"))``.

Routes use names (queue, jid, worker, tag, group, throttle id), never list positions; the
converters accept exactly what the engine accepts, so anything else is a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.urls import URLPattern, path, register_converter

from django_qless.views import (
    api,
    api_tag,
    bulk,
    bulk_all,
    completed,
    engine_config,
    failed,
    flows,
    job_state,
    jobs,
    live,
    metrics,
    overview,
    queue_empty,
    queue_failed,
    queues,
    rate_limits,
    recurring,
    recurring_run,
    schedules,
    tags,
    throttles,
    tracked,
    workers,
)
from django_qless.views import console as console_views
from django_qless.views import search as search_views
from django_qless.views.converters import CONVERTERS

__all__ = ["app_name", "get_urlpatterns", "urlpatterns"]

app_name = "django_qless"

for _name, _converter in CONVERTERS.items():
    register_converter(_converter, _name)


def _failed_action(action: str) -> Callable[..., Any]:
    def view(request: Any, group: str) -> Any:
        return failed.failed_bulk(request, group, action)

    view.__name__ = f"failed_{action}"
    return view


def get_urlpatterns(wrap: Callable[[Any], Any] | None = None) -> list[URLPattern]:
    """Build the patterns; ``wrap`` (e.g. ``admin_site.admin_view``) wraps the HTML pages."""

    def page(route: str, view: Any, name: str) -> URLPattern:
        wrapped = wrap(view) if wrap is not None else view
        return path(route, wrapped, name=name)  # type: ignore[no-any-return]

    def token(route: str, view: Any, name: str) -> URLPattern:
        # JSON and metrics accept a bearer token, so the admin's login redirect must not wrap them.
        return path(route, view, name=name)  # type: ignore[no-any-return]

    return [
        page("", overview.overview, "overview"),
        page("queues/<qless_queue:name>/", queues.queue_detail, "queue"),
        page("queues/<qless_queue:name>/pause/", queues.queue_pause, "queue_pause"),
        page("queues/<qless_queue:name>/unpause/", queues.queue_unpause, "queue_unpause"),
        page("queues/<qless_queue:name>/settings/", queues.queue_settings, "queue_settings"),
        page("queues/<qless_queue:name>/rate-limit/", rate_limits.queue_rate_limit,
             "queue_rate_limit"),
        page("queues/<qless_queue:name>/<qless_state:state>/", queues.queue_tab, "queue_tab"),
        page("jobs/<qless_jid:jid>/", jobs.job_detail, "job"),
        page("jobs/<qless_jid:jid>/cancel/", jobs.job_cancel, "job_cancel"),
        page("jobs/<qless_jid:jid>/retry/", jobs.job_retry, "job_retry"),
        page("jobs/<qless_jid:jid>/move/", jobs.job_move, "job_move"),
        page("jobs/<qless_jid:jid>/priority/", jobs.job_priority, "job_priority"),
        page("jobs/<qless_jid:jid>/track/", jobs.job_track, "job_track"),
        page("jobs/<qless_jid:jid>/untrack/", jobs.job_untrack, "job_untrack"),
        page("jobs/<qless_jid:jid>/tag/", jobs.job_tag, "job_tag"),
        page("jobs/<qless_jid:jid>/untag/", jobs.job_untag, "job_untag"),
        page("jobs/<qless_jid:jid>/timeout/", jobs.job_timeout, "job_timeout"),
        page("jobs/<qless_jid:jid>/undepend/", jobs.job_undepend, "job_undepend"),
        page("flows/<qless_flow:flow_id>/", flows.flow_detail, "flow"),
        page("flows/<qless_flow:flow_id>/retry/", flows.flow_retry, "flow_retry"),
        page("flows/<qless_flow:flow_id>/cancel/", flows.flow_cancel, "flow_cancel"),
        page("failed/", failed.failed_groups, "failed"),
        page("failed/group/<qless_group:group>", failed.failed_group, "failed_group"),
        page("failed/retry/<qless_group:group>", _failed_action("retry"), "failed_retry"),
        page("failed/cancel/<qless_group:group>", _failed_action("cancel"), "failed_cancel"),
        page("tracked/", tracked.tracked, "tracked"),
        page("tags/", tags.tags, "tags"),
        page("tags/<qless_tag:tag>", tags.tag_detail, "tag"),
        page("workers/", workers.workers, "workers"),
        page("workers/<qless_worker:name>", workers.worker_detail, "worker"),
        page("recurring/", recurring.recurring, "recurring"),
        page("recurring/<qless_jid:jid>/", recurring.recurring_detail, "recurring_detail"),
        page("recurring/<qless_jid:jid>/cancel/", recurring.recurring_cancel, "recurring_cancel"),
        page("schedules/", schedules.schedules, "schedules"),
        page("schedules/<qless_jid:name>/run/", schedules.schedule_run, "schedule_run"),
        page("config/", engine_config.config, "config"),
        page("config/unset/", engine_config.config_unset, "config_unset"),
        page("throttles/", throttles.throttles, "throttles"),
        page("throttles/delete/<qless_throttle:tid>", throttles.throttle_delete,
             "throttle_delete"),
        page("completed/", completed.completed, "completed"),
        page("events/", live.events, "events"),
        token("api/overview/", api.api_overview, "api_overview"),
        token("api/queues/", api.api_queues, "api_queues"),
        token("api/queues/<qless_queue:name>/", api.api_queue, "api_queue"),
        token("api/queues/<qless_queue:name>/<qless_state:state>/", api.api_queue_tab,
              "api_queue_tab"),
        token("api/jobs/<qless_jid:jid>/", api.api_job, "api_job"),
        token("api/jobs/<qless_jid:jid>/summary/", job_state.api_job_summary, "api_job_summary"),
        token("api/failed/", api.api_failed, "api_failed"),
        token("api/failed/<qless_group:group>", api.api_failed_group, "api_failed_group"),
        token("api/workers/", api.api_workers, "api_workers"),
        token("api/workers/<qless_worker:name>", api.api_worker, "api_worker"),
        token("api/tracked/", api.api_tracked, "api_tracked"),
        token("api/tags/", api.api_tags, "api_tags"),
        token("api/completed/", api.api_completed, "api_completed"),
        token("api/events/", live.events_stream, "api_events"),
        token("metrics", metrics.metrics, "metrics"),
        # -- operator's console (bulk and row actions, retry all failed) --------------
        page("bulk/jobs/", bulk.jobs_bulk, "jobs_bulk"),
        page("failed/retry-all/", failed.failed_retry_all, "failed_retry_all"),
        *_console_patterns(page, token),
        *_operator_patterns(page, token),
    ]


def _operator_patterns(page: Callable[..., URLPattern],
                       token: Callable[..., URLPattern]) -> list[URLPattern]:
    """Operator's tools: empty or delete a queue, act on all matching jobs, run a recurring
    job now."""
    return [
        page("bulk/all/", bulk_all.jobs_all, "jobs_all"),
        page("queues/<qless_queue:name>/failed/", queue_failed.queue_failed, "queue_failed"),
        page("recurring/<qless_jid:jid>/run/", recurring_run.recurring_run, "recurring_run"),
        token("api/tags/<qless_tag:tag>", api_tag.api_tag, "api_tag"),
        token("api/recurring/", recurring.api_recurring, "api_recurring"),
        token("api/recurring/<qless_jid:jid>/", recurring.api_recurring_job, "api_recurring_job"),
        token("api/throttles/", throttles.api_throttles, "api_throttles"),
        token("api/config/", engine_config.api_config, "api_config"),
        page("queues/<qless_queue:name>/empty/", queue_empty.queue_empty, "queue_empty"),
    ]


def _console_patterns(page: Callable[..., URLPattern],
                      token: Callable[..., URLPattern]) -> list[URLPattern]:
    """Operator's console: worker liveness, quiet and stop, search, charts, the Redis page,
    forgetting."""
    return [
        # (a worker name may contain "/", so the name is the last part of the path)
        page("forget-worker/<qless_worker:name>", workers.worker_forget, "worker_forget"),
        page("quiet-worker/<qless_worker:name>", workers.worker_quiet, "worker_quiet"),
        page("stop-worker/<qless_worker:name>", workers.worker_stop, "worker_stop"),
        page("queues/<qless_queue:name>/forget/", console_views.queue_forget, "queue_forget"),
        page("search/", search_views.search, "search"),
        page("charts/", console_views.charts, "charts"),
        page("redis/", console_views.redis_page, "redis"),
        token("api/workers-info/", workers.api_workers_info, "api_workers_info"),
        token("api/worker-page/<qless_worker:name>", workers.api_worker_page, "api_worker_page"),
    ]


urlpatterns = get_urlpatterns()
