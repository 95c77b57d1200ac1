"""The engine's config: view every option, set or unset one."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.core.client import Client
from django_qless.core.engine_config import (
    DEFAULTS,
    KNOWN_OPTIONS,
    allowed_text,
    is_known_option,
    queue_option_rules,
)
from django_qless.forms import ConfigForm, first_error
from django_qless.views.base import (
    api_view,
    dashboard_view,
    logger,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.live_blocks import live_block, live_json
from django_qless.views.shards import shard_clients

__all__ = ["api_config", "config", "config_unset"]

DEFAULT_KEYS = tuple(sorted(KNOWN_OPTIONS))


@dashboard_view()
def config(request: HttpRequest) -> HttpResponse:
    """List the config (defaults overlaid with stored values); POST sets one option."""
    clients = shard_clients(request)
    client = clients[0]
    if request.method == "POST":
        form = ConfigForm(request.POST)
        if not form.is_valid():
            messages.error(request, first_error(form))
            return redirect_back(request, qurl(request, "config"))
        key, value = form.cleaned_data["key"], form.cleaned_data["value"]
        for shard in clients:  # every shard keeps its own config: set it everywhere
            shard.config[key] = value
        logger.info("user %s set config %s=%s", request.user, key, value)
        if is_known_option(key):
            messages.success(request, f"Set option {key} to {value}.")
        else:
            messages.warning(request, f"Set {key} to {value}, but that is not an option the "
                                      "engine knows: it changes nothing. Check the spelling "
                                      "against the known options below.")
        return redirect_back(request, qurl(request, "config"))
    listing = _listing(client)
    return render_page(request, "django_qless/config.html",
                       {**listing, "form": ConfigForm(),
                        **live_block(request, "api_config", listing),
                        "known": [(k, allowed_text(k)) for k in DEFAULT_KEYS],
                        "queue_rules": queue_option_rules()},
                       title="Config", crumbs=[("Config", None)])


def _listing(client: Client) -> dict[str, Any]:
    """Return every option with its value, whether it is the default, and its bounds."""
    values = client.config.all or {}
    return {"rows": [{"key": str(k), "value": v, "known": is_known_option(str(k)),
                      "allowed": allowed_text(str(k)),
                      "default": str(k) in DEFAULTS and str(v) == str(DEFAULTS[str(k)])}
                     for k, v in sorted(values.items())]}


@api_view
def api_config(request: HttpRequest) -> HttpResponse:
    """Every option (``rows``: key, value, default or set, allowed values) and a version."""
    return live_json(_listing(shard_clients(request)[0]))


@dashboard_view(post_only=True)
def config_unset(request: HttpRequest) -> HttpResponse:
    """Unset one option (it falls back to its default)."""
    clients = shard_clients(request)
    client = clients[0]
    key = request.POST.get("key", "").strip()
    if not key or len(key) > 128:
        messages.error(request, "Key: choose an option to unset.")
        return redirect_back(request, qurl(request, "config"))
    values = client.config.all or {}
    if key not in values:
        messages.info(request, f"Option {key} is not set: nothing to reset.")
        return redirect_back(request, qurl(request, "config"))
    if key in DEFAULTS and str(values[key]) == str(DEFAULTS[key]) and all(
            str((shard.config.all or {}).get(key)) == str(DEFAULTS[key]) for shard in clients[1:]):
        messages.info(request, f"Option {key} is already at its default ({DEFAULTS[key]}): "
                               f"nothing to reset.")
        return redirect_back(request, qurl(request, "config"))
    for shard in clients:
        if key in (shard.config.all or {}):
            del shard.config[key]
    logger.info("user %s unset config %s", request.user, key)
    default = DEFAULTS.get(key)
    messages.success(request, f"Reset option {key} to its default ({default})." if default
                     is not None else f"Unset option {key}: the engine no longer reads a value.")
    return redirect_back(request, qurl(request, "config"))
