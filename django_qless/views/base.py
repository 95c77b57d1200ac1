"""Permission checks, security headers and small helpers shared by every dashboard view."""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect

from django_qless.core.engine_config import KNOWN_OPTIONS
from django_qless.core.exceptions import (
    InvalidArgument,
    JobNotFound,
    LostLockError,
    QlessConnectionError,
    QlessError,
)
from django_qless.core.health import UNREACHABLE_ERRORS
from django_qless.core.types import QlessClient
from django_qless.reporting import CredentialFilter

__all__ = [
    "CSP",
    "MANAGE_PERM",
    "PER_PAGE",
    "VIEW_PERM",
    "Pager",
    "api_view",
    "can_manage",
    "client_for",
    "counted",
    "dashboard_view",
    "get_pager",
    "namespace",
    "object_page",
    "plain_error",
    "qurl",
    "redirect_back",
    "render_page",
    "secure_headers",
    "ui_settings",
    "user_of",
]

logger = logging.getLogger("django_qless")

# Errors that mean the server cannot be reached: the client's own, and redis-py's from the
# reads that go to the server directly (the Redis page's INFO, SLOWLOG, CONFIG).
UNREACHABLE: tuple[type[Exception], ...] = (QlessConnectionError, *UNREACHABLE_ERRORS)

VIEW_PERM = "django_qless.view_dashboard"
MANAGE_PERM = "django_qless.manage_jobs"
PER_PAGE = 25
MAX_PAGE = 4000  # offsets stay below 100 000: listings are indexed, never scans
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)

ViewFunc = Callable[..., HttpResponse]


def ui_settings() -> Mapping[str, Any]:
    """Return the ``QLESS_UI`` setting (alias, API token, poll interval)."""
    value = getattr(settings, "QLESS_UI", None) or {}
    return value if isinstance(value, Mapping) else {}


def client_for(request: HttpRequest) -> QlessClient:
    """Return the client of the alias the dashboard shows (``QLESS_UI['ALIAS']``): a Client,
    or a ShardedClient (views/shards.py reads every shard of it)."""
    from django_qless.views.shards import deployment

    return deployment(request)


def secure_headers(response: HttpResponse) -> HttpResponse:
    """Add the CSP, frame and sniffing headers every dashboard response carries."""
    response["Content-Security-Policy"] = CSP
    response["X-Frame-Options"] = "DENY"
    response["X-Content-Type-Options"] = "nosniff"
    response["Referrer-Policy"] = "same-origin"
    return response


def namespace(request: HttpRequest) -> str:
    """Return the URL namespace the dashboard is mounted under for this request."""
    match = getattr(request, "resolver_match", None)
    ns = match.namespace if match is not None else ""
    if ns.endswith("django_qless"):
        return ns
    if ns == "admin":  # the admin changelist entry point
        return "admin:django_qless"
    return "django_qless"


def qurl(
    request: HttpRequest, name: str, *args: Any, query: Mapping[str, Any] | None = None
) -> str:
    """Reverse a dashboard URL in the namespace of the current request."""
    url = reverse(f"{namespace(request)}:{name}", args=args)
    if query:
        url += "?" + urlencode(query)
    return url


def user_of(request: HttpRequest) -> Any:
    """Return the request's user (any auth user model: only the permission API is used)."""
    return request.user


def can_manage(request: HttpRequest) -> bool:
    """Tell whether the user may act (retry, cancel, move, config...)."""
    return bool(user_of(request).has_perm(MANAGE_PERM))


def _admin_site(request: HttpRequest) -> Any:
    site = getattr(request, "qless_admin_site", None)
    if site is None:
        from django.contrib import admin

        site = admin.site
    return site


def _login_url() -> str:
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return str(settings.LOGIN_URL)


def render_page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    title: str,
    crumbs: list[tuple[str, str | None]] | None = None,
    status: int = 200,
) -> HttpResponse:
    """Render a dashboard page with the admin chrome (header, sidebar, theme)."""
    ctx: dict[str, Any] = dict(_admin_site(request).each_context(request))
    ctx.update(
        title=title,
        qless_ns=namespace(request),
        can_manage=can_manage(request),
        qless_crumbs=crumbs or [],
        poll_interval=int(ui_settings().get("POLL_INTERVAL_MS", 3000)),
    )
    from django_qless.views.shards import shard_context

    ctx.update(shard_context(request))
    ctx.update(context)
    return render(request, template, ctx, status=status)


def _error(request: HttpRequest, status: int, message: str) -> HttpResponse:
    try:
        return render_page(
            request, "django_qless/error.html", {"message": message},
            title=f"Error {status}", status=status,
        )
    except Exception:  # noqa: BLE001 - the error page must never raise itself
        logger.exception("error page failed")
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def _check_access(request: HttpRequest, manage: bool) -> HttpResponse | None:
    user = user_of(request)
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path(), _login_url())
    if not (user.is_active and user.is_staff and user.has_perm(VIEW_PERM)):
        return _error(request, 403, "You do not have permission to view the queue dashboard.")
    if (manage or request.method not in ("GET", "HEAD")) and not user.has_perm(MANAGE_PERM):
        return _error(request, 403, "You do not have permission to act on queues and jobs.")
    return None


def dashboard_view(
    *, manage: bool = False, post_only: bool = False
) -> Callable[[ViewFunc], ViewFunc]:
    """Guard a page: staff + view permission; POST (or ``manage``) also needs manage_jobs."""

    def decorate(func: ViewFunc) -> ViewFunc:
        @wraps(func)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            request.exception_reporter_filter = CredentialFilter()
            denied = _check_access(request, manage)
            if denied is not None:
                return secure_headers(denied)
            if post_only and request.method != "POST":
                response: HttpResponse = _error(request, 405, "This action needs a POST.")
                response["Allow"] = "POST"
                return secure_headers(response)
            try:
                response = func(request, *args, **kwargs)
                if request.method == "POST":
                    # Audit trail of every action: who, what, on which names, outcome.
                    logger.info("qless action %s by %s %s -> %s", func.__name__,
                                user_of(request), kwargs, response.status_code)
            except (JobNotFound, Http404) as exc:
                response = _error(request, 404, _not_found_text(exc))
            except PermissionDenied:
                response = _error(request, 403, "Permission denied.")
            except UNREACHABLE:
                logger.exception("redis unreachable")
                response = _error(request, 503, "The queue server cannot be reached right now.")
            except (InvalidArgument, LostLockError, QlessError) as exc:
                if request.method == "POST":
                    # A refused action: say why and go back (PRG), never a 500.
                    logger.info("qless action %s by %s %s refused: %s", func.__name__,
                                user_of(request), kwargs, exc)
                    messages.error(request, plain_error(exc))
                    response = redirect_back(request, object_page(request, kwargs),
                                             use_referer=True)
                else:
                    response = _error(request, 400, str(exc))
            return secure_headers(response)

        return never_cache(csrf_protect(wrapper))

    return decorate


_ENGINE_PREFIX = re.compile(r"^[A-Za-z.]+\(\): ")


# A first word that is a name (`grace-period`, `q.high`, `my_tag`, `w1`), not prose.
_NAME_LIKE = re.compile(r"[-_.:/0-9A-Z\"']")


def counted(n: int, word: str, plural: str | None = None) -> str:
    """Return "1 job", "2 jobs": a count with its noun in the right number."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def plain_error(exc: Exception) -> str:
    """Return an engine refusal as a sentence (without the command's ``Name(): `` prefix)."""
    text = _ENGINE_PREFIX.sub("", str(exc).strip()) or "The queue server refused this action."
    first = text.split(" ", 1)[0]
    if not _NAME_LIKE.search(first) and first not in KNOWN_OPTIONS:
        text = text[:1].upper() + text[1:]  # (a key or other name keeps its spelling)
    return text if text.endswith((".", "!", "?")) else text + "."


# The page an action's object lives on, by URL name prefix and the URL's own arguments.
_OBJECT_PAGES = (("job", "job", "jid"), ("recurring", "recurring_detail", "jid"),
                 ("queue", "queue", "name"), ("failed", "failed_group", "group"),
                 ("throttle", "throttles", None), ("config", "config", None))


def object_page(request: HttpRequest, kwargs: Mapping[str, Any]) -> str:
    """Return the URL of the page showing the object an action was about (else the overview)."""
    match = getattr(request, "resolver_match", None)
    url_name = (match.url_name or "") if match is not None else ""
    for prefix, page, arg in _OBJECT_PAGES:
        if url_name.startswith(prefix) and (arg is None or arg in kwargs):
            try:
                return qurl(request, page, *([kwargs[arg]] if arg else []))
            except NoReverseMatch:
                break
    return qurl(request, "overview")


def _not_found_text(exc: Exception) -> str:
    if isinstance(exc, JobNotFound):
        return "That job does not exist: it was canceled, has expired, or never existed."
    return str(exc) or "Not found."


def bearer_ok(request: HttpRequest) -> bool:
    """Compare the request's bearer token with ``QLESS_UI['API_TOKEN']`` in constant time."""
    token = ui_settings().get("API_TOKEN")
    header = request.headers.get("Authorization", "")
    if not token or not header.startswith("Bearer "):
        return False
    given = header[len("Bearer ") :].strip()
    return hmac.compare_digest(given.encode("utf-8"), str(token).encode("utf-8"))


def api_view(func: ViewFunc) -> ViewFunc:
    """Guard a read-only JSON/text endpoint: staff session with view permission, or bearer."""

    @wraps(func)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        request.exception_reporter_filter = CredentialFilter()
        response: HttpResponse
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse("GET only\n", status=405, content_type="text/plain")
            response["Allow"] = "GET, HEAD"
            return secure_headers(response)
        user = user_of(request)
        allowed = bearer_ok(request) or (
            user.is_authenticated and user.is_active and user.is_staff and user.has_perm(VIEW_PERM)
        )
        if not allowed:
            status = 403 if user.is_authenticated else 401
            response = HttpResponse("forbidden\n", status=status, content_type="text/plain")
            if status == 401:
                response["WWW-Authenticate"] = 'Bearer realm="qless"'
            return secure_headers(response)
        try:
            response = func(request, *args, **kwargs)
        except (JobNotFound, Http404):
            response = HttpResponse('{"error": "not found"}', status=404,
                                    content_type="application/json")
        except UNREACHABLE:
            response = HttpResponse('{"error": "redis unreachable"}', status=503,
                                    content_type="application/json")
        return secure_headers(response)

    return never_cache(wrapper)


def _safe(request: HttpRequest, target: str) -> bool:
    return bool(target) and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure())


def redirect_back(
    request: HttpRequest, default: str, *, use_referer: bool = False
) -> HttpResponseRedirect:
    """Redirect to a safe local ``next`` (or, for refusals, Referer), else ``default`` (PRG)."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if _safe(request, target):
        return HttpResponseRedirect(target)
    # After a refusal the page the form was on still shows what the user was doing.
    referer = request.headers.get("Referer", "") if use_referer else ""
    if _safe(request, referer):
        return HttpResponseRedirect(referer)
    return HttpResponseRedirect(default)


@dataclass(frozen=True)
class Pager:
    """One page of an indexed listing; ``total`` is None when the engine gives no count."""

    number: int
    per_page: int
    total: int | None
    has_next: bool

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.per_page

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def num_pages(self) -> int | None:
        if self.total is None:
            return None
        return max(1, -(-self.total // self.per_page))

    def with_rows(self, rows: int, total: int | None = None) -> Pager:
        """Return a copy that knows whether a next page exists."""
        tot = self.total if total is None else total
        more = (self.offset + self.per_page < tot) if tot is not None else rows > self.per_page
        return Pager(self.number, self.per_page, tot, more)


def get_pager(request: HttpRequest, total: int | None = None, per_page: int = PER_PAGE) -> Pager:
    """Read ``?page=`` (bad or out-of-range values fall back to a valid page)."""
    try:
        number = int(request.GET.get("page", "1"))
    except ValueError:
        number = 1
    number = min(max(number, 1), MAX_PAGE)
    if total is not None:
        number = min(number, max(1, -(-total // per_page)))
    pager = Pager(number, per_page, total, False)
    if total is not None:
        return pager.with_rows(0, total)
    return pager
