"""Put one job of a recurring template now, outside its schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..serialization import new_jid, put_options

if TYPE_CHECKING:
    from ..recurring import RecurringJob

__all__ = ["run_recurring_now"]


def run_recurring_now(template: RecurringJob) -> str:
    """Put a job like the template's children (class, data verbatim, priority, tags,
    retries, throttles) into its queue now; the template's next run is unchanged."""
    jid = new_jid()
    options = put_options(priority=template.priority, tags=template.tags,
                          retries=template.retries, depends=None,
                          throttles=template.throttles or None, jid=jid)
    client = template.client
    result: str = client.call_text("put", [client.worker_name, template.queue_name, jid,
                                           template.klass_name, template.raw_data, "0",
                                           *options])
    return result
