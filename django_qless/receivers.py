"""Signal receivers connected in ``AppConfig.ready``.

Always on: reset parsed settings and cached clients when ``QLESS`` changes (tests).
Switched on in ``QLESS["RECEIVERS"]``: mail the admins when a job fails
(``MAIL_ADMINS_ON_FAILURE``) and POST tracked-job events to ``WEBHOOK_URL``.
Both act on bridged signals, so they run in ``manage.py qless_events``.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from django.core.mail import mail_admins
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_qless import signals
from django_qless.conf import clear_cache, get_settings

__all__ = ["mail_admins_on_failure", "reset_on_setting_changed", "webhook"]

log = logging.getLogger("django_qless")


@receiver(setting_changed)
def reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """Forget parsed QLESS settings and cached clients."""
    if setting == "QLESS":
        from django_qless.clients import clients

        clear_cache(setting=setting)
        clients.close_all()


@receiver(signals.job_failed)
def mail_admins_on_failure(sender: str, event: signals.JobEvent, **kwargs: Any) -> None:
    """Mail ADMINS about a failed job (if MAIL_ADMINS_ON_FAILURE)."""
    if not get_settings().receivers.mail_admins_on_failure:
        return
    group = event.group or "?"
    message = (event.message or "")[:5000]
    mail_admins(f"qless job {event.jid} failed: {group}",
                f"Job {event.jid} failed on worker {event.worker or '?'} "
                f"(alias {sender}).\n\nGroup: {group}\n\n{message}")


def _post(url: str, body: dict[str, Any], timeout: float) -> None:
    request = urllib.request.Request(  # noqa: S310 - scheme checked in settings.py
        url, data=json.dumps(body).encode("utf-8"), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "django-qless"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        response.read()


def webhook(sender: str, event: signals.JobEvent, **kwargs: Any) -> None:
    """POST an event about a tracked job to WEBHOOK_URL (if configured)."""
    conf = get_settings().receivers
    if not conf.webhook_url or event.event not in conf.webhook_events or event.client is None:
        return
    job = event.client.jobs.get(event.jid)
    if job is None or not job.tracked:
        return
    payload = dict(event.payload)
    if event.shard is not None:
        payload["shard"] = event.shard
    body = {"event": event.event, "jid": event.jid, "alias": sender, "payload": payload,
            "job": {"klass": job.klass_name, "queue": job.queue_name, "state": job.state,
                    "tags": list(job.tags), "priority": job.priority}}
    try:
        _post(conf.webhook_url, body, conf.webhook_timeout)
    except OSError as exc:
        log.warning("django_qless: webhook POST for %s %s failed: %s", event.event, event.jid,
                    exc)


for _signal in signals.BRIDGED_SIGNALS.values():
    _signal.connect(webhook, dispatch_uid=f"django_qless.webhook.{id(_signal)}")
