// toolfleet console: the run page's live transcript over Server-Sent Events.
// The server renders every fragment with html/template (escaped); model text
// deltas arrive as JSON and are only ever set as text.
(function () {
  "use strict";
  var list = document.getElementById("transcript");
  if (!list || !window.EventSource) { return; }
  var streaming = document.getElementById("streaming");
  var state = document.getElementById("live-state");
  var summary = document.getElementById("summary");
  var turn = -1, attempt = -1;
  var es = new EventSource(list.getAttribute("data-events"));
  function say(text) { if (state) { state.textContent = text; } }
  es.onopen = function () { say("live"); };
  es.onerror = function () { say(es.readyState === EventSource.CLOSED ? "stopped" : "reconnecting…"); };
  es.addEventListener("entry", function (e) {
    streaming.textContent = "";
    list.insertAdjacentHTML("beforeend", e.data);
  });
  es.addEventListener("summary", function (e) { if (summary) { summary.innerHTML = e.data; } });
  es.addEventListener("delta", function (e) {
    var d = JSON.parse(e.data);
    if (d.turn !== turn || d.attempt > attempt) { turn = d.turn; attempt = d.attempt; streaming.textContent = ""; }
    if (d.attempt < attempt) { return; }
    streaming.textContent += d.text;
  });
  es.addEventListener("problem", function (e) { say(e.data); });
  es.addEventListener("end", function (e) {
    es.close();
    streaming.textContent = "";
    say("run " + e.data);
    document.body.classList.add("run-ended");
  });
})();
