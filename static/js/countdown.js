/* Expiry countdowns for confirmation cards and approval requests (no dependencies).
 *
 * Any element with data-expires-at="<ISO 8601>" shows the time left ("14:32 left / 剩余").
 * When it reaches zero the element gets .expired and the buttons of its card
 * ([data-request-id], the inbox pane [data-pane-for], or .confirm-card that is not .resolved) are disabled: the server refuses
 * late decisions anyway; this only keeps people from trying.
 */
(function () {
  "use strict";

  function format(ms) {
    var total = Math.max(0, Math.floor(ms / 1000));
    var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    return (h > 0 ? h + ":" + pad(m) : m) + ":" + pad(s);
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-expires-at]").forEach(function (el) {
      var card = el.closest("[data-request-id], [data-pane-for], .confirm-card");
      if (card && card.classList.contains("resolved")) { return; }
      var at = Date.parse(el.getAttribute("data-expires-at"));
      if (isNaN(at)) { return; }
      var left = at - now;
      if (left <= 0) {
        if (!el.classList.contains("expired")) {
          el.classList.add("expired");
          el.textContent = "expired / 已过期";
          if (card) {
            card.classList.add("is-expired");
            card.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
          }
        }
        return;
      }
      el.classList.toggle("soon", left < 60000);
      el.textContent = format(left) + " left / 剩余";
    });
  }

  window.APCountdown = { tick: tick, format: format };
  tick();
  setInterval(tick, 1000);
})();
