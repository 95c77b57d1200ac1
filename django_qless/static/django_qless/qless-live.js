/* django-qless: pause or resume live refresh and choose its interval, kept in localStorage
 * for every dashboard page (qless.js reads the same keys before each refresh; the Events
 * page's stream, which has no interval, closes while paused). */
(function () {
  "use strict";
  var root = document.getElementById("qless");
  var status = root && root.querySelector("[data-live-status]");
  var polled = !!document.querySelector("[data-live-src]");
  if (!status || !(polled || document.querySelector("[data-events-src]"))) { return; }
  var store;
  try { store = window.localStorage; store.getItem("qless.livePaused"); } catch (e) { return; }
  var CHOICES = [[1000, "1 s"], [3000, "3 s"], [5000, "5 s"], [10000, "10 s"],
                 [30000, "30 s"], [60000, "1 min"]];
  var box = document.createElement("span");
  box.className = "qless-live-controls";
  var toggle = document.createElement("button");
  toggle.type = "button";
  toggle.className = "button";
  toggle.setAttribute("data-live-toggle", "");
  var label = document.createElement("label");
  label.textContent = "every";
  label.className = "visually-hidden";
  label.htmlFor = "qless-live-interval";
  var select = document.createElement("select");
  select.id = "qless-live-interval";
  select.setAttribute("data-live-interval", "");
  select.title = "Live refresh interval";
  var base = parseInt(root.getAttribute("data-poll-interval"), 10) || 3000;
  var chosen = parseInt(store.getItem("qless.liveInterval"), 10) || base;
  var known = false;
  CHOICES.forEach(function (choice) {
    var option = document.createElement("option");
    option.value = String(choice[0]);
    option.textContent = choice[1];
    if (choice[0] === chosen) { option.selected = true; known = true; }
    select.appendChild(option);
  });
  if (!known) {
    var own = document.createElement("option");
    own.value = String(chosen);
    own.textContent = (chosen / 1000) + " s";
    own.selected = true;
    select.insertBefore(own, select.firstChild);
  }
  function paused() { return store.getItem("qless.livePaused") === "1"; }
  function show() {
    toggle.textContent = paused() ? "Resume live" : "Pause live";
    toggle.setAttribute("aria-pressed", paused() ? "true" : "false");
    if (paused()) { status.textContent = "live refresh paused"; }
  }
  toggle.addEventListener("click", function () {
    if (paused()) { store.removeItem("qless.livePaused"); } else { store.setItem("qless.livePaused", "1"); }
    show();
    document.dispatchEvent(new CustomEvent("qless:live"));
  });
  select.addEventListener("change", function () {
    store.setItem("qless.liveInterval", select.value);
  });
  box.appendChild(toggle);
  if (polled) {  // a stream has no interval to choose
    box.appendChild(label);
    box.appendChild(select);
  }
  status.parentNode.insertBefore(box, status.nextSibling);
  show();
}());
