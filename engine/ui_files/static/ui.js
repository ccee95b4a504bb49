// ledgerfs ui: live updates. Every second the page asks /latest what the journal's
// newest state is; when it changed, a live page (a listing) swaps in its fresh
// content, and any other page offers a reload. No library, nothing fetched elsewhere.
(function () {
  "use strict";
  var seen = document.body.dataset.version;
  var INTERVAL = 1000;

  function markNew(fresh, old) {
    var before = {};
    old.querySelectorAll("[data-tx]").forEach(function (row) { before[row.dataset.tx] = true; });
    fresh.querySelectorAll("[data-tx]").forEach(function (row) {
      if (!before[row.dataset.tx]) { row.classList.add("flash"); }
    });
  }

  function refresh() {
    return fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        var old = document.querySelector("main");
        if (fresh && old) {
          markNew(fresh, old);
          old.replaceWith(document.adoptNode(fresh));
        }
      });
  }

  function poll() {
    fetch("/latest", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (latest) {
        if (!latest || latest.version === seen) { return; }
        seen = latest.version;
        document.body.dataset.version = seen;
        var main = document.querySelector("main");
        if (main && main.hasAttribute("data-live")) { return refresh(); }
        document.getElementById("fresh").hidden = false;
      })
      .catch(function () { /* the server stopped: try again later */ })
      .then(function () { setTimeout(poll, INTERVAL); });
  }

  setTimeout(poll, INTERVAL);
})();
