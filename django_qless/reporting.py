"""An exception-reporter filter that never shows a credential on an error page.

Django's `SafeExceptionReporterFilter` hides settings and request META entries whose *name*
looks secret (`PASS`, `KEY`, `TOKEN`…); a Redis URL such as `QLESS_URL=redis://:pw@host`
(from the environment, on the technical 500 page) or `QLESS["default"]["URL"]` has an
innocent name and its password in the value. This filter also masks the password (and user
name) inside any URL-like value: settings, request META and the traceback's variables.
The dashboard's views use it on every request; a project uses it everywhere with
`DEFAULT_EXCEPTION_REPORTER_FILTER = "django_qless.reporting.CredentialFilter"`.
"""

from __future__ import annotations

import re
from typing import Any

from django.views.debug import SafeExceptionReporterFilter

__all__ = ["CredentialFilter", "mask_credentials"]

# scheme://user:password@ or scheme://:password@ (up to the last @ of the word: a password
# may hold an unencoded / or @), and a ?password= query parameter.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^\s'\"]*@")
_QUERY_PASSWORD = re.compile(r"(?P<name>[?&]password=)[^&\s'\"]*", flags=re.I)
_MASK = SafeExceptionReporterFilter.cleansed_substitute


def mask_credentials(text: str) -> str:
    """Replace the credentials of every URL in `text` with the cleansed substitute."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{_MASK}@", text)
    return _QUERY_PASSWORD.sub(lambda m: f"{m.group('name')}{_MASK}", text)


class _Masked:
    """An object shown by its repr with URL credentials masked."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


class CredentialFilter(SafeExceptionReporterFilter):
    """Django's safe filter, plus URL credentials masked wherever they appear."""

    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|CREDENTIAL|AUTH", flags=re.I)

    def is_active(self, request: Any) -> bool:
        """Filter always, DEBUG included: the page that leaks is the DEBUG one."""
        return True

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        """Hide by name as Django does, then mask URL credentials in what is left."""
        return self._mask(super().cleanse_setting(key, value))

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> Any:
        """Return the frame's variables with secret-named keys hidden, URL credentials masked."""
        return [(name, self._mask(value))
                for name, value in super().get_traceback_frame_variables(request, tb_frame)]

    def _mask(self, value: Any, depth: int = 0) -> Any:
        """Mask credentials in strings, dicts (secret-named keys too), lists and tuples; any
        other object whose repr shows a URL with credentials is shown by a masked repr."""
        if isinstance(value, str):
            return mask_credentials(value)
        if depth > 8:
            return value
        if isinstance(value, dict):
            return {k: (self.cleansed_substitute if isinstance(k, str)
                        and self.hidden_settings.search(k) else self._mask(v, depth + 1))
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            items = [self._mask(v, depth + 1) for v in value]
            return items if isinstance(value, list) else tuple(items)
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - Django's own page shows such errors itself
            return value
        masked = mask_credentials(text)
        return value if masked == text else _Masked(masked)
