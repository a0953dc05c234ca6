// Progressive enhancement only: every page works without this script.
// On the request builder, quotes refresh as the buyer edits; the form's
// plain submit still works.
(function () {
  "use strict";
  var form = document.querySelector("form[data-live-quotes]");
  var target = document.getElementById("quotes");
  if (!form || !target || !window.fetch || !window.URLSearchParams) return;
  var timer = null;
  var seq = 0;
  function refresh() {
    var params = new URLSearchParams(new FormData(form));
    var n = ++seq;
    target.classList.add("quotes-loading");
    fetch(form.action + "?" + params.toString(), {
      headers: { "X-Quotes-Partial": "1" },
      credentials: "same-origin"
    }).then(function (resp) {
      return resp.text();
    }).then(function (html) {
      if (n !== seq) return; // a newer edit is on its way
      target.innerHTML = html;
      target.classList.remove("quotes-loading");
      if (window.history && history.replaceState) {
        history.replaceState(null, "", form.action + "?" + params.toString());
      }
    }).catch(function () {
      target.classList.remove("quotes-loading");
    });
  }
  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 350);
  }
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
})();
