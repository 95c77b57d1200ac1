"""Stored XSS probes in every Redis-controlled field render only escaped."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_qless.core.client import Client as CoreClient
from tests.ui.conftest import XSS_PROBES


class Elements(HTMLParser):
    """Collect start tags with attributes and any inline script text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.inline_script = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_script += data.strip()


PACKAGE = Path(__file__).resolve().parents[2] / "django_qless"


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


@pytest.fixture
def poisoned(qc: Any) -> dict[str, Any]:
    """Jobs whose tags, data, klass, failure, group and worker names carry the probes."""
    made: dict[str, Any] = {"jids": []}
    for i, probe in enumerate(XSS_PROBES):
        for _ in range(2):  # twice, so the tag shows in the top tags
            jid = qc.queues["q"].put(probe, {"payload": probe, "k" + probe: [probe]},
                                     tags=[probe, f"t{i}"])
            qc.jobs[jid].track()
            made["jids"].append(jid)
    for probe in XSS_PROBES:
        worker = probe if " " not in probe else "w-plain"
        popper = CoreClient(qc.redis, worker_name=worker)
        job = popper.queues["q"].pop()
        job.log(probe, {"note": probe})
        job.fail(probe, f"Traceback\n{probe}")
    running = CoreClient(qc.redis, worker_name=XSS_PROBES[0]).queues["q"].pop()
    made["running"] = running.jid
    qc.queues["q"].recur(XSS_PROBES[1], {"x": XSS_PROBES[2]}, 60, jid="rx",
                         tags=[XSS_PROBES[0]])
    return made


def pages(made: dict[str, Any]) -> list[str]:
    out = [url("overview"), url("queue", "q"), url("failed"), url("tracked"), url("tags"),
           url("workers"), url("recurring"), url("recurring_detail", "rx"), url("completed")]
    out += [url("queue_tab", "q", s) for s in ("waiting", "running", "recurring")]
    out += [url("job", jid) for jid in made["jids"]]
    out += [url("tag", p) for p in XSS_PROBES]
    out += [url("failed_group", p) for p in XSS_PROBES]
    out += [url("failed_retry", p) for p in XSS_PROBES]
    out += [url("worker", p) for p in XSS_PROBES if " " not in p]
    return out


def test_probes_render_only_escaped(mc: Client, poisoned: dict[str, Any]) -> None:
    seen_escaped = set()
    for page in pages(poisoned):
        response = mc.get(page)
        assert response.status_code == 200, page
        body = response.content.decode()
        for probe in XSS_PROBES:
            assert probe not in body, (page, probe)
            if html.escape(probe) in body:
                seen_escaped.add(probe)
        # Parsed as a browser would: no handler attribute, no injected element, no inline code.
        parsed = Elements()
        parsed.feed(body)
        assert not [a for _, attrs in parsed.tags for a, _ in attrs if a.startswith("on")], page
        assert "img" not in {t for t, _ in parsed.tags}, page
        assert parsed.inline_script == "", page
        assert all(dict(attrs).get("src") for t, attrs in parsed.tags if t == "script"), page
    assert seen_escaped == set(XSS_PROBES)


def test_job_page_shows_probe_text_in_pre(mc: Client, poisoned: dict[str, Any]) -> None:
    failed = [j for j in poisoned["jids"] if j in str(mc.get(url("failed_group",
                                                                 XSS_PROBES[0])).content)]
    body = mc.get(url("job", failed[0])).content.decode()
    escaped = html.escape(XSS_PROBES[0])
    assert re.search(r'<pre class="qless-traceback">Traceback\n' + re.escape(escaped), body)
    assert "&quot;payload&quot;: &quot;" + escaped in body


def test_links_percent_encode_names(mc: Client, poisoned: dict[str, Any]) -> None:
    body = mc.get(url("tags")).content.decode()
    assert 'href="/qless/tags/%3Cscript%3Ealert(1)%3C/script%3E"' in body
    assert mc.get("/qless/tags/%3Cscript%3Ealert(1)%3C/script%3E").status_code == 200


def test_json_api_is_json_not_html(mc: Client, poisoned: dict[str, Any]) -> None:
    response = mc.get(url("api_overview"))
    assert response["Content-Type"] == "application/json"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert mc.get(url("metrics"))["Content-Type"].startswith("text/plain")


def test_templates_never_disable_escaping() -> None:
    for path in (PACKAGE / "templates").rglob("*.html"):
        text = path.read_text()
        assert "|safe" not in text and "autoescape off" not in text, path
        assert not re.search(r"\son[a-z]+\s*=", text), path
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert "javascript:" not in text, path
    ours = [*PACKAGE.glob("views/*.py"), *PACKAGE.glob("templatetags/*.py"),
            PACKAGE / "forms.py", PACKAGE / "admin.py", PACKAGE / "urls.py"]
    for path in ours:
        assert "mark_safe" not in path.read_text() and "format_html" not in path.read_text(), path


def test_static_script_never_writes_html() -> None:
    script = (PACKAGE / "static" / "django_qless" / "qless.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function"):
        assert sink not in script, sink
