/* Swagger UI (templates/drf_spectacular/swagger_ui.html), accessibility: each operation's summary
 * is a button that holds a link to the operation's own anchor, a control inside a control
 * (axe-core nested-interactive). The link's href is taken away, so the text stays and only the
 * button is focusable; operations rendered later (expanding a tag, filtering) are handled too. */
(function () {
  "use strict";
  function fix(root) {
    root.querySelectorAll(".opblock-summary-control a[href]").forEach(function (link) {
      link.removeAttribute("href");
    });
  }
  function start() {
    var ui = document.getElementById("swagger-ui");
    if (!ui) { return; }
    fix(ui);
    new MutationObserver(function () { fix(ui); }).observe(ui, { childList: true, subtree: true });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
