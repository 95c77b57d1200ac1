"""Forms for the dashboard's actions; each validates like the engine (docs/engine.md)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from django_qless.core.engine_config import check_config, queue_settings_bounds
from django_qless.core.exceptions import InvalidArgument

__all__ = [
    "ConfigForm",
    "FailedFilterForm",
    "MoveForm",
    "PriorityForm",
    "QueueSettingsForm",
    "RecurringForm",
    "StatsDateForm",
    "TagForm",
    "ThrottleForm",
    "UndependForm",
    "day_start",
    "first_error",
    "parse_moment",
    "split_tags",
]

INT32_MIN, INT32_MAX = -2147483648, 2147483647
_QUEUE_BOUNDS = queue_settings_bounds()
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
JID_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# Day inputs as text in the console's own format: a browser's date picker shows its locale's
# (mm/dd/yyyy) beside the YYYY-MM-DD every page prints.
DAY_INPUT = {"type": "text", "pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}", "placeholder": "YYYY-MM-DD",
             "size": "10", "maxlength": "10", "inputmode": "numeric"}
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# The engine's rule for throttle ids (docs/engine.md): printable ASCII without spaces.
THROTTLE_ID_RE = re.compile(r"[!-~]{1,128}")
THROTTLE_ID_RULE = ("1 to 128 ASCII letters, digits or punctuation such as - _ . : "
                    "(no spaces, no accented or other non-ASCII letters)")


def _printable(value: str, label: str, max_bytes: int) -> str:
    value = value.strip()
    if not value:
        raise ValidationError(f"{label} must not be empty.")
    if len(value.encode("utf-8")) > max_bytes:
        raise ValidationError(f"{label} is longer than {max_bytes} bytes.")
    if CONTROL_RE.search(value):
        raise ValidationError(f"{label} must not contain control characters.")
    return value


def split_tags(text: str) -> list[str]:
    """Split a comma- or newline-separated tag list, dropping blanks and duplicates."""
    seen: list[str] = []
    for part in re.split(r"[,\n]", text):
        tag = part.strip()
        if tag and tag not in seen:
            seen.append(tag)
    return seen


def first_error(form: forms.Form) -> str:
    """Return the form's first error as one friendly sentence."""
    for field, errors in form.errors.items():
        label = form.fields[field].label if field in form.fields else None
        prefix = f"{label or field.replace('_', ' ').capitalize()}: " if field != "__all__" else ""
        return f"{prefix}{errors[0]}"
    return "Invalid value."


class PriorityForm(forms.Form):
    """Change a job's priority (higher runs sooner)."""

    priority = forms.IntegerField(min_value=INT32_MIN, max_value=INT32_MAX)


class MoveForm(forms.Form):
    """Move a job to another queue."""

    queue = forms.CharField(max_length=64)

    def clean_queue(self) -> str:
        value = str(self.cleaned_data["queue"]).strip()
        if not QUEUE_RE.match(value):
            raise ValidationError("Queue names are 1-64 characters of A-Z a-z 0-9 _ . -")
        return value


class TagForm(forms.Form):
    """Add or remove one tag."""

    tag = forms.CharField(max_length=200, strip=False)

    def clean_tag(self) -> str:
        return _printable(str(self.cleaned_data["tag"]), "Tag", 64)


class UndependForm(forms.Form):
    """Remove one dependency from a job."""

    dependency = forms.CharField(max_length=64)

    def clean_dependency(self) -> str:
        value = str(self.cleaned_data["dependency"]).strip()
        if not JID_RE.match(value):
            raise ValidationError("Not a valid jid.")
        return value


class QueueSettingsForm(forms.Form):
    """Per-queue heartbeat, max concurrency and throttle maximum (blank = leave as is)."""

    heartbeat = forms.IntegerField(
        min_value=_QUEUE_BOUNDS["heartbeat"][0], max_value=_QUEUE_BOUNDS["heartbeat"][1],
        required=False, help_text="Seconds a job's lease lasts between heartbeats.")
    max_concurrency = forms.IntegerField(
        min_value=_QUEUE_BOUNDS["max_concurrency"][0],
        max_value=_QUEUE_BOUNDS["max_concurrency"][1], required=False, label="Max concurrency",
        help_text="How many jobs of this queue may run at the same time, across all workers "
                  "(the queue's own cap; 0 means no cap).")
    throttle = forms.IntegerField(
        min_value=0, max_value=INT32_MAX, required=False, label="Throttle maximum",
        help_text="The limit of this queue's own throttle (see the Throttles page). A "
                  "throttle is a named limit on running jobs that several queues and jobs can "
                  "share by naming it: together they count against one total (0 means no "
                  "limit).")


class QueueRateLimitForm(forms.Form):
    """A queue's rate limit: N jobs started per period, optionally one budget per key."""

    rate = forms.CharField(
        max_length=32, required=False, label="Rate limit",
        help_text="At most this many of the queue's jobs start per period, across all workers: "
                  "'100/m', '10/s', '1000/h', '5/30s'. Blank removes the limit.")
    key = forms.CharField(
        max_length=128, required=False, label="Per key",
        help_text="Optional: a dotted path into the job data ('customer', 'kwargs.user_id'); "
                  "each value gets its own budget.")

    def clean(self) -> dict[str, Any]:
        from django_qless.core.scheduling.ratelimit import RateLimitError, check_key, parse_rate

        cleaned = super().clean() or {}
        rate, key = (cleaned.get("rate") or "").strip(), (cleaned.get("key") or "").strip()
        try:
            cleaned["rate"] = parse_rate(rate) if rate else None
            cleaned["key"] = check_key(key) or None
        except RateLimitError as exc:
            raise ValidationError(str(exc)) from None
        if key and not rate:
            raise ValidationError("A key needs a rate: set both, or clear the rate.")
        return cleaned


class StatsDateForm(forms.Form):
    """Pick the day whose statistics a queue page shows."""

    date = forms.DateField(required=False, input_formats=["%Y-%m-%d"])

    def clean_date(self) -> dt.date | None:
        value: dt.date | None = self.cleaned_data.get("date")
        if value is not None and not dt.date(1970, 1, 2) <= value <= dt.date(2999, 12, 31):
            raise ValidationError("Choose a day between 1970 and 2999.")
        return value


def day_start(day: dt.date) -> float:
    """Return the epoch seconds at which ``day`` starts in the current time zone."""
    from django.utils import timezone

    midnight = dt.datetime.combine(day, dt.time())
    return timezone.make_aware(midnight).timestamp()


def parse_moment(text: str, *, until: bool = False) -> float:
    """Parse epoch seconds, a day (YYYY-MM-DD) or an ISO datetime (ValueError if none).

    A day means its start, or with ``until`` the start of the next day (the day included);
    naive datetimes are read in the current time zone.
    """
    from django_qless.options import epoch_of

    text = text.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return float(text)
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        day = dt.date.fromisoformat(text)
        return day_start(day + dt.timedelta(days=1) if until else day)
    try:
        return epoch_of(dt.datetime.fromisoformat(text))
    except ValueError:
        raise ValueError(f"expected epoch seconds, YYYY-MM-DD or an ISO datetime, got "
                         f"{text[:40]!r}") from None


class FailedFilterForm(forms.Form):
    """Filter a failure group's jobs by queue and by the day they failed (both optional)."""

    queue = forms.CharField(required=False, max_length=64)
    since = forms.DateField(required=False, input_formats=["%Y-%m-%d"],
                            widget=forms.DateInput(attrs=DAY_INPUT),
                            label="Failed from")
    until = forms.DateField(required=False, input_formats=["%Y-%m-%d"],
                            widget=forms.DateInput(attrs=DAY_INPUT), label="to")

    def clean_queue(self) -> str | None:
        value = str(self.cleaned_data.get("queue") or "").strip()
        if value and not QUEUE_RE.match(value):
            raise ValidationError("Queue names are 1-64 characters of A-Z a-z 0-9 _ . -")
        return value or None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        for day in (since, until):
            if day is not None and not dt.date(1970, 1, 2) <= day <= dt.date(2999, 12, 31):
                raise ValidationError("Choose days between 1970 and 2999.")
        if since is not None and until is not None and until < since:
            raise ValidationError("The last day is before the first one.")
        return data

    @property
    def active(self) -> bool:
        """Tell whether a valid filter was given."""
        return self.is_bound and self.is_valid() and any(
            self.cleaned_data.get(k) for k in ("queue", "since", "until"))

    def bounds(self) -> tuple[float | None, float | None]:
        """Return [since, until) in epoch seconds; ``until`` includes its whole day."""
        since, until = self.cleaned_data.get("since"), self.cleaned_data.get("until")
        return (None if since is None else day_start(since),
                None if until is None else day_start(until + dt.timedelta(days=1)))


class RecurringForm(forms.Form):
    """Edit a recurring job's schedule and options (never its class: no code execution)."""

    interval = forms.FloatField(min_value=1, max_value=31536000)
    priority = forms.IntegerField(min_value=INT32_MIN, max_value=INT32_MAX)
    retries = forms.IntegerField(min_value=0, max_value=1000)
    tags = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="Comma separated.")

    def clean_tags(self) -> list[str]:
        tags = split_tags(str(self.cleaned_data.get("tags") or ""))
        if len(tags) > 50:
            raise ValidationError("At most 50 tags.")
        return [_printable(t, "Tag", 64) for t in tags]


class ConfigForm(forms.Form):
    """Set one engine config option."""

    key = forms.CharField(max_length=200)
    value = forms.CharField(max_length=1000)

    def clean_key(self) -> str:
        return _printable(str(self.cleaned_data["key"]), "Key", 128)

    def clean_value(self) -> str:
        return _printable(str(self.cleaned_data["value"]), "Value", 1000)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "key" in data and "value" in data:
            try:  # the engine's own rule for the option, in its words, before anything is sent
                data["value"] = check_config(data["key"], data["value"])
            except InvalidArgument as exc:
                raise ValidationError(f"Option {data['key']} was not changed: {exc}.") from exc
        return data


class ThrottleForm(forms.Form):
    """Create or change a throttle."""

    id = forms.CharField(
        max_length=200, label="Throttle id",
        help_text=f"{THROTTLE_ID_RULE[:1].upper()}{THROTTLE_ID_RULE[1:]}.")
    maximum = forms.IntegerField(min_value=0, max_value=INT32_MAX)
    ttl = forms.IntegerField(min_value=0, max_value=INT32_MAX, required=False, label="TTL (s)")

    def clean_id(self) -> str:
        value = _printable(str(self.cleaned_data["id"]), "Throttle id", 128)
        if not THROTTLE_ID_RE.fullmatch(value):
            raise ValidationError(f"{value!r} is not a throttle id: use {THROTTLE_ID_RULE}.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("ttl") is None:
            data["ttl"] = 0
        return data
