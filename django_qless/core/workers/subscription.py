"""The worker's pub/sub: views of keyspaces on one connection per node (core/node_pubsub.py).

Each consumer (the job loop's wake-ups, the supervisor's `w:<child>` channels, the serial
worker's listener thread) keeps one `Hub`: one connection per primary, whatever number of
shards that primary holds.
"""

from __future__ import annotations

from django_qless.core.cluster.node_pubsub import MESSAGE_TYPES, PUBSUB_ERRORS, Hub, Subscription

__all__ = ["Hub", "MESSAGE_TYPES", "PUBSUB_ERRORS", "Subscription"]
