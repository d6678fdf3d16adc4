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
  // The summary holds the approve/deny and answer forms: it is not replaced
  // while the person is typing in it, but once they leave it.
  var pendingSummary = null;
  function typing() { return summary && document.activeElement && summary.contains(document.activeElement); }
  function showSummary(html) { if (typing()) { pendingSummary = html; return; } summary.innerHTML = html; pendingSummary = null; }
  es.addEventListener("summary", function (e) { if (summary) { showSummary(e.data); } });
  if (summary) {
    summary.addEventListener("focusout", function () {
      setTimeout(function () { if (pendingSummary !== null && !typing()) { showSummary(pendingSummary); } }, 0);
    });
  }
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
    if (e.data === "signed out") { say("signed out: reload the page to sign in again"); return; }
    say("run " + e.data);
    document.body.classList.add("run-ended");
  });
})();

// The header's inbox count and the inbox list, live: a Server-Sent Events
// stream the server bounds; closed when the page goes away. The list is a
// fragment rendered (escaped) by the server; it is not replaced while the
// person is typing in it.
(function () {
  "use strict";
  var link = document.getElementById("inbox-link");
  if (!link || !window.EventSource) { return; }
  var items = document.getElementById("inbox-items");
  var state = document.getElementById("inbox-live");
  var waiting = null;
  var es = new EventSource(link.getAttribute("data-events"));
  function say(text) { if (state) { state.textContent = text; } }
  function busy() { return items && document.activeElement && items.contains(document.activeElement); }
  function show(html) { if (busy()) { waiting = html; return; } items.innerHTML = html; waiting = null; }
  es.onopen = function () { say("live"); };
  es.onerror = function () { say(es.readyState === EventSource.CLOSED ? "" : "reconnecting…"); };
  es.addEventListener("count", function (e) {
    var n = parseInt(e.data, 10) || 0;
    var c = document.getElementById("inbox-count");
    if (n > 0) {
      if (!c) {
        c = document.createElement("span");
        c.className = "count";
        c.id = "inbox-count";
        link.appendChild(document.createTextNode(" "));
        link.appendChild(c);
      }
      c.textContent = String(n);
    } else if (c) {
      c.parentNode.removeChild(c);
    }
  });
  es.addEventListener("inbox", function (e) { if (items) { show(e.data); } });
  if (items) {
    items.addEventListener("focusout", function () {
      setTimeout(function () { if (waiting !== null && !busy()) { show(waiting); } }, 0);
    });
  }
  es.addEventListener("end", function () { es.close(); say(""); });
  window.addEventListener("pagehide", function () { es.close(); });
})();

// The program page, live: the summary (status, result, the forms of what
// waits) and the calls, re-rendered by the server (escaped) after each event
// of the program; the summary is not replaced while the person types in it.
(function () {
  "use strict";
  var live = document.getElementById("program-live");
  if (!live || !window.EventSource) { return; }
  var summary = document.getElementById("program-summary");
  var calls = document.getElementById("program-calls-panel");
  var state = document.getElementById("program-live-state");
  var waiting = null;
  var es = new EventSource(live.getAttribute("data-events"));
  function say(text) { if (state) { state.textContent = text; } }
  function typing() { return summary && document.activeElement && summary.contains(document.activeElement); }
  function show(html) { if (typing()) { waiting = html; return; } summary.innerHTML = html; waiting = null; }
  es.onopen = function () { say("live"); };
  es.onerror = function () { say(es.readyState === EventSource.CLOSED ? "stopped" : "reconnecting…"); };
  es.addEventListener("summary", function (e) { if (summary) { show(e.data); } });
  es.addEventListener("calls", function (e) { if (calls) { calls.innerHTML = e.data; } });
  es.addEventListener("problem", function (e) { say(e.data); });
  es.addEventListener("end", function (e) {
    es.close();
    say(e.data === "signed out" ? "signed out: reload the page to sign in again" : "program " + e.data);
  });
  if (summary) {
    summary.addEventListener("focusout", function () {
      setTimeout(function () { if (waiting !== null && !typing()) { show(waiting); } }, 0);
    });
  }
  window.addEventListener("pagehide", function () { es.close(); });
})();
