/* django-qless dashboard: live refresh by polling the JSON API, and small conveniences.
 * Every page works without this file. Values from Redis are only ever written with
 * textContent or into URL paths through encodeURIComponent: never as HTML. */
(function () {
  "use strict";

  var root = document.getElementById("qless");
  if (!root) { return; }
  var interval = parseInt(root.getAttribute("data-poll-interval"), 10) || 3000;
  var status = root.querySelector("[data-live-status]");

  // Every time on the dashboard is UTC (the pages say so): "HH:MM:SS UTC".
  function utcTime(date) {
    return date.toISOString().slice(11, 19) + " UTC";
  }

  function lookup(obj, path) {
    var parts = path.split(".");
    for (var i = 0; i < parts.length; i++) {
      if (obj === null || obj === undefined) { return undefined; }
      obj = obj[parts[i]];
    }
    return obj;
  }

  function show(value) {
    if (value === null || value === undefined) { return ""; }
    if (Array.isArray(value)) { return value.join(", "); }
    if (typeof value === "boolean") { return value ? "yes" : ""; }
    return String(value);
  }

  function owned(container, selector) {
    // Elements whose nearest live container is this one (containers may sit side by side).
    return Array.prototype.filter.call(container.querySelectorAll(selector), function (el) {
      return el.closest("[data-live-src]") === container;
    });
  }

  function pathPart(value) {
    // Escape a URL path argument exactly as Django's reverse() does, so a refreshed link is
    // identical to the server-rendered one (reverse leaves $&+,;=/:@ as they are).
    return encodeURIComponent(value).replace(/%(24|26|2B|2C|3B|3D|2F|3A|40)/g, function (m) {
      return decodeURIComponent(m);
    });
  }

  function fillRow(template, item) {
    var frag = template.content.cloneNode(true);
    consoleFill(frag, item);
    frag.querySelectorAll("[data-field]").forEach(function (el) {
      el.textContent = show(item[el.getAttribute("data-field")]);
    });
    frag.querySelectorAll("[data-href]").forEach(function (el) {
      var value = item[el.getAttribute("data-href-field")];
      if (value === null || value === undefined || value === "") {
        el.remove();  // the page renders no link for an empty value
      } else {
        el.setAttribute("href", el.getAttribute("data-href").replace(
          "__qv__", pathPart(String(value))));
        el.removeAttribute("data-href");
        el.removeAttribute("data-href-field");
      }
    });
    frag.querySelectorAll("[data-attr-field]").forEach(function (el) {
      var name = el.getAttribute("data-attr-name") || "";
      var value = item[el.getAttribute("data-attr-field")];
      if (/^data-[a-z-]+$/.test(name) && value !== null && value !== undefined) {
        el.setAttribute(name, show(value));
      }
      el.removeAttribute("data-attr-name");
      el.removeAttribute("data-attr-field");
    });
    frag.querySelectorAll("[data-flag-field]").forEach(function (el) {
      var cls = el.getAttribute("data-flag-class") || "";
      if (item[el.getAttribute("data-flag-field")] === true && /^[a-z-]+$/.test(cls)) {
        el.classList.add(cls);
      }
      el.removeAttribute("data-flag-field");
      el.removeAttribute("data-flag-class");
    });
    frag.querySelectorAll(".qless-state[data-field]").forEach(function (el) {
      if (/^[a-z-]+$/.test(el.textContent)) { el.classList.add("qless-state-" + el.textContent); }
    });
    frag.querySelectorAll("[data-field]").forEach(function (el) { el.removeAttribute("data-field"); });
    return frag;
  }

  function emptyRow(template, text) {
    var tr = document.createElement("tr");
    var td = document.createElement("td");
    tr.className = "qless-empty";
    td.colSpan = template.content.querySelectorAll("td").length || 1;
    td.textContent = text;
    tr.appendChild(td);
    return tr;
  }

  function typing(container) {
    var el = document.activeElement;
    return !!el && container.contains(el) && /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName);
  }

  function reloadBlock(container) {
    // The job page: re-read the rendered block once, so every part of it agrees.
    if (typing(container)) { return null; }  // never under the user's cursor; next poll
    return fetch(container.getAttribute("data-live-page"), {
      credentials: "same-origin",
      headers: {"Accept": "text/html"},
      cache: "no-store"
    }).then(function (response) {
      if (response.status === 404) { window.location.reload(); return; }
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text().then(function (html) {
        // An inert document: the server's escaped HTML, nothing runs while parsing it.
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = container.id ? doc.getElementById(container.id) : null;
        if (!fresh) { window.location.reload(); return; }
        fresh = document.importNode(fresh, true);
        container.replaceWith(fresh);
        containers[containers.indexOf(container)] = fresh;
      });
    });
  }

  function apply(container, payload) {
    if (container.hasAttribute("data-live-version")) {
      if (payload.version === container.getAttribute("data-live-version")) { return null; }
      return reloadBlock(container);
    }
    consoleStale(container, payload);
    owned(container, "[data-live-text]").forEach(function (el) {
      var value = lookup(payload, el.getAttribute("data-live-text"));
      if (value !== undefined) { el.textContent = show(value); }
    });
    owned(container, "[data-live-rows]").forEach(function (body) {
      var key = body.getAttribute("data-live-rows");
      var items = lookup(payload, key);
      var table = body.closest("table");
      var template = table && table.querySelector("template[data-live-template='" + key + "']");
      if (!Array.isArray(items) || !template) { return; }
      if (consoleBusy(body)) { return; }  // never rebuild rows under the user's hands
      var signature = JSON.stringify(items);
      if (body.getAttribute("data-live-signature") === signature) { return; }
      body.setAttribute("data-live-signature", signature);
      var kept = consoleChecked(body);
      while (body.firstChild) { body.removeChild(body.firstChild); }
      if (items.length === 0) {
        body.appendChild(emptyRow(template, body.getAttribute("data-live-empty") || "Nothing here."));
      }
      items.forEach(function (item) { body.appendChild(fillRow(template, item)); });
      consoleRecheck(body, kept);
    });
  }

  function say(text) { if (status) { status.textContent = text; } }

  var containers = Array.prototype.slice.call(document.querySelectorAll("[data-live-src]"));
  var failures = 0;

  // The user's live-refresh choices (qless-live.js writes them): paused, and an interval.
  function stored(key) {
    try { return window.localStorage.getItem("qless." + key); } catch (e) { return null; }
  }

  function poll() {
    if (document.hidden || containers.length === 0 || stored("livePaused") === "1") {
      schedule(); return;
    }
    var pending = containers.map(function (container) {
      return fetch(container.getAttribute("data-live-src"), {
        credentials: "same-origin",
        headers: {"Accept": "application/json"},
        cache: "no-store"
      }).then(function (response) {
        if (response.status === 404 && container.hasAttribute("data-live-page")) {
          window.location.reload();  // the job is gone: show the page saying so
          return null;
        }
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      }).then(function (payload) { return payload === null ? null : apply(container, payload); });
    });
    Promise.all(pending).then(function () {
      failures = 0;
      say("live \u00b7 " + utcTime(new Date()));
    }, function () {
      failures += 1;
      say("live updates unavailable, retrying");
    }).then(schedule);
  }

  function schedule() {
    var chosen = parseInt(stored("liveInterval"), 10);
    var every = chosen >= 1000 && chosen <= 600000 ? chosen : interval;
    window.setTimeout(poll, every * Math.min(1 + failures, 10));
  }

  if (containers.length) {
    document.documentElement.setAttribute("data-qless-live", "on");
    say("live");
    schedule();
  }

  // The Events page: Server-Sent Events from the engine, rendered as text only. Pausing live
  // refresh closes the stream; resuming opens it from the last event seen (?last=), so the
  // server replays what it still holds, or says where events may be missing.
  var stream = document.querySelector("[data-events-src]");
  var source = null;
  var lastEventId = "";

  function openEvents() {
    var src = stream.getAttribute("data-events-src");
    if (lastEventId) {
      src += (src.indexOf("?") < 0 ? "?" : "&") + "last=" + encodeURIComponent(lastEventId);
    }
    source = new EventSource(src);
    var cell = function (row, text, hrefTemplate) {
      var td = document.createElement("td");
      if (hrefTemplate && text) {
        var a = document.createElement("a");
        a.setAttribute("href", hrefTemplate.replace("__qv__", encodeURIComponent(text)));
        a.textContent = text;
        td.appendChild(a);
      } else {
        td.textContent = text || "";
      }
      row.appendChild(td);
    };
    source.addEventListener("open", function () { say("live events"); });
    source.addEventListener("error", function () { say("reconnecting"); eventsDropped(); });
    source.addEventListener("gap", function () { eventsGap(stream); });
    source.addEventListener("qless", function (message) {
      var item;
      lastEventId = message.lastEventId || lastEventId;
      try { item = JSON.parse(message.data); } catch (e) { return; }
      var empty = stream.querySelector(".qless-empty");
      if (empty) { empty.remove(); }
      var row = document.createElement("tr");
      row.setAttribute("data-event", show(item.event));
      cell(row, utcTime(new Date((item.when || 0) * 1000)));
      if (stream.hasAttribute("data-shard-column")) {
        var shardCell = document.createElement("td");
        shardCell.className = "qless-shard";
        shardCell.textContent = show(item.shard);
        row.appendChild(shardCell);
      }
      cell(row, show(item.event));
      cell(row, show(item.jid), stream.getAttribute("data-job-url"));
      cell(row, show(item.queue || item.to), stream.getAttribute("data-queue-url"));
      cell(row, show(item.worker));
      cell(row, [item.group, item.message, item.option, item.value].filter(function (v) {
        return v !== undefined && v !== null && v !== false && v !== "";
      }).map(show).join(" \u00b7 "));
      eventsSeen();
      stream.insertBefore(row, stream.firstChild);
      while (stream.rows.length > 200) { stream.deleteRow(stream.rows.length - 1); }
    });
  }

  function followPause() {
    // qless-live.js announces a pause or resume with a "qless:live" event.
    var paused = stored("livePaused") === "1";
    if (paused && source) {
      source.close();
      source = null;
      eventsDropped();
    } else if (!paused && !source) {
      openEvents();
    }
  }

  if (stream && window.EventSource) {
    document.addEventListener("qless:live", followPause);
    if (stored("livePaused") !== "1") { openEvents(); }
  }

  // Buttons that change something important ask first (pages also work without this).
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-confirm]");
    if (button && !window.confirm(button.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });

  // ---- operator's console: row actions, selections, stale notices, events resume ----

  function consoleFill(frag, item) {
    // Conditional parts of a row (shown for some states only), and attribute values that
    // are not links: form actions (URL path part escaped) and checkbox values.
    frag.querySelectorAll("[data-when-field]").forEach(function (el) {
      var value = show(item[el.getAttribute("data-when-field")]);
      if (typeof item[el.getAttribute("data-when-field")] === "boolean") {
        value = String(item[el.getAttribute("data-when-field")]);
      }
      var within = el.hasAttribute("data-when-in")
        ? el.getAttribute("data-when-in").split(" ").indexOf(value) >= 0
        : el.getAttribute("data-when-not").split(" ").indexOf(value) < 0;
      if (!within) { el.remove(); return; }
      el.removeAttribute("data-when-field");
      el.removeAttribute("data-when-in");
      el.removeAttribute("data-when-not");
    });
    frag.querySelectorAll("[data-action]").forEach(function (el) {
      var value = item[el.getAttribute("data-action-field")];
      el.setAttribute("action", el.getAttribute("data-action").replace(
        "__qv__", pathPart(show(value))));
      el.removeAttribute("data-action");
      el.removeAttribute("data-action-field");
    });
    frag.querySelectorAll("[data-value-field]").forEach(function (el) {
      el.setAttribute("value", show(item[el.getAttribute("data-value-field")]));
      el.removeAttribute("data-value-field");
    });
  }

  function consoleBusy(body) {
    // Focus inside the rows (typing a queue name) or an open actions menu: wait.
    var el = document.activeElement;
    return (!!el && el !== document.body && body.contains(el)) ||
      !!body.querySelector("details[open]");
  }

  function consoleChecked(body) {
    return Array.prototype.map.call(
      body.querySelectorAll("input[type=checkbox][name=jid]:checked"),
      function (box) { return box.value; });
  }

  function consoleRecheck(body, jids) {
    body.querySelectorAll("input[type=checkbox][name=jid]").forEach(function (box) {
      box.checked = jids.indexOf(box.value) >= 0;
    });
    consoleCount(body.closest("table"));
  }

  function consoleCount(table) {
    var all = table && table.querySelector("[data-select-all]");
    if (!all) { return; }
    var form = all.getAttribute("data-select-all");
    var boxes = document.querySelectorAll("input[type=checkbox][name=jid][form='" + form + "']");
    var checked = Array.prototype.filter.call(boxes, function (b) { return b.checked; });
    all.checked = boxes.length > 0 && checked.length === boxes.length;
    document.querySelectorAll("[data-selected-count='" + form + "']").forEach(function (el) {
      el.textContent = String(checked.length);
    });
  }

  function consoleStale(container, payload) {
    // A page that does not rebuild its rows says when they are out of date instead.
    owned(container, "[data-live-stale]").forEach(function (el) {
      var now = lookup(payload, el.getAttribute("data-live-stale"));
      if (now === undefined) { return; }
      el.hidden = String(now) === el.getAttribute("data-live-initial");
      el.querySelectorAll("[data-live-now]").forEach(function (n) { n.textContent = show(now); });
    });
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.hasAttribute && target.hasAttribute("data-select-all")) {
      var form = target.getAttribute("data-select-all");
      document.querySelectorAll("input[type=checkbox][name=jid][form='" + form + "']")
        .forEach(function (box) { box.checked = target.checked; });
    }
    if (target.matches && target.matches("input[type=checkbox]")) {
      consoleCount(target.closest("table"));
    }
  });

  // The event stream resumes from the last event id after a reconnect; when the server
  // cannot replay (another process, or a buffer that restarted) it sends "gap" instead.
  var eventsLastSeen = new Date();
  var eventsDroppedAt = null;

  function eventsSeen() { eventsLastSeen = new Date(); eventsDroppedAt = null; }

  function eventsDropped() { if (!eventsDroppedAt) { eventsDroppedAt = eventsLastSeen; } }

  function eventsGap(body) {
    var from = eventsDroppedAt || eventsLastSeen;
    eventsDroppedAt = null;
    var row = document.createElement("tr");
    var td = document.createElement("td");
    row.className = "qless-gap";
    td.colSpan = 6;
    td.textContent = "Reconnected \u2014 events between " + utcTime(from) +
      " and " + utcTime(new Date()) + " may be missing.";
    row.appendChild(td);
    var empty = body.querySelector(".qless-empty");
    if (empty) { empty.remove(); }
    body.insertBefore(row, body.firstChild);
  }
}());
