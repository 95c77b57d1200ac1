"""Live refresh of a server-rendered block: the page polls a small JSON fingerprint of what the
block shows and re-reads the block only when it changed (qless.js, ``data-live-version``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.http import HttpRequest, JsonResponse

from django_qless.views.base import qurl

__all__ = ["fingerprint", "live_block", "live_json"]


def fingerprint(shown: Any) -> str:
    """Digest what a block shows, so any change is seen without sending the block."""
    text = json.dumps(shown, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def live_block(request: HttpRequest, api_name: str, shown: dict[str, Any],
               *args: str) -> dict[str, str]:
    """Return the template context of a live block: its poll URL (``args`` for the route,
    and the page's query, so the same page and shard are digested), its version and the page
    to re-read."""
    return {"live_src": qurl(request, api_name, *args, query=request.GET.dict()),
            "live_version": fingerprint(shown),
            "live_page": request.get_full_path()}


def live_json(shown: dict[str, Any]) -> JsonResponse:
    """Answer a block's poll: what the block shows, and its version."""
    return JsonResponse({**shown, "version": fingerprint(shown)},
                        json_dumps_params={"ensure_ascii": False})
