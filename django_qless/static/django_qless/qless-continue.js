/* django-qless: submit a progress page's form again (each POST does one bounded slice of the
 * work), unless the user has pressed "Stop". Without this file the button does the same. */
(function () {
  "use strict";
  var form = document.querySelector("form[data-auto-continue]");
  if (!form) { return; }
  var stopped = false;
  var note = form.querySelector("[data-continue-note]");
  var stop = document.createElement("button");
  stop.type = "button";
  stop.className = "button";
  stop.textContent = "Stop";
  stop.addEventListener("click", function () {
    stopped = true;
    stop.disabled = true;
    if (note) { note.textContent = "(stopped: press Continue to go on)"; }
  });
  form.insertBefore(stop, note);
  window.setTimeout(function () { if (!stopped) { form.submit(); } }, 1000);
}());
