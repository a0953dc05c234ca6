// Progressive enhancement for every page; each works without this script.
// The navigation's <details> menus close when another opens, on a click
// elsewhere and on Escape. Copy buttons ([data-copy], hidden without
// script) copy their text: without script the text itself is selectable.
(function () {
  "use strict";
  var groups = Array.prototype.slice.call(document.querySelectorAll("details[data-nav-group]"));
  function closeAll(except) {
    groups.forEach(function (g) { if (g !== except) g.open = false; });
  }
  groups.forEach(function (g) {
    g.addEventListener("toggle", function () { if (g.open) closeAll(g); });
  });
  document.addEventListener("click", function (e) {
    if (!e.target.closest || !e.target.closest("details[data-nav-group]")) closeAll(null);
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    groups.forEach(function (g) {
      if (g.open) { g.open = false; g.querySelector("summary").focus(); }
    });
  });

  function copied(btn) {
    var label = btn.textContent;
    btn.textContent = "Copied";
    setTimeout(function () { btn.textContent = label; }, 1500);
  }
  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), function (btn) {
    var target = document.getElementById(btn.getAttribute("data-copy"));
    if (!target) return;
    btn.hidden = false;
    btn.addEventListener("click", function () {
      var text = target.textContent.trim();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { copied(btn); }, function () { selectText(target); });
        return;
      }
      selectText(target);
      try { if (document.execCommand("copy")) copied(btn); } catch (err) { /* the text stays selected to copy by hand */ }
    });
  });
})();
