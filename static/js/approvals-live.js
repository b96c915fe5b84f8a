/* Live approvals (docs/notifications.md, "Live dashboard"). No dependencies.
 *
 * Every page with the navigation's count ([data-approvals-nav]) asks /approvals/live/ every
 * data-poll-seconds (paused while the tab is hidden, asked again when it shows) and updates
 * the count. On the inbox ([data-live]: its list, and a request's pane or own page) it also:
 *  - inserts the lines of new requests (data-live="insert": taken from a copy of the list drawn
 *    without a pane, so polling never claims nor records an opening),
 *  - updates "approvals n / quorum" and who is reviewing a request,
 *  - marks a line (and the pane) whose request ended meanwhile (decided by someone else,
 *    expired) and disables its buttons; the server refuses a late decision anyway, with a
 *    readable message.
 */
(function () {
  "use strict";

  var nav = document.querySelector("[data-approvals-nav]");
  if (!nav || !window.fetch) { return; }
  var liveUrl = nav.getAttribute("data-live-url");
  var seconds = parseInt(nav.getAttribute("data-poll-seconds"), 10) || 5;
  var list = document.querySelector("[data-live]");
  var timer = null;
  var busy = false;

  var ENDED_TEXT = {
    EXPIRED: "Expired before a decision; nothing will run. / 已过期，不会执行。",
    REJECTED: "Rejected{by}; nothing will run. / 已被拒绝，不会执行。",
    CONFIRMED: "Approved{by}: quorum reached, it runs now. / 已批准，即将执行。",
    EXECUTED: "Approved{by} and executed. / 已批准并执行。",
    CANCELLED: "Cancelled; nothing will run. / 已取消。",
    SUPERSEDED: "Replaced by a newer request. / 已被新请求取代。",
    WITHDRAWN: "Withdrawn by the requester; nothing will run. / 申请人已撤回，不会执行。",
    RESPONDED: "Answered with guidance{by}; nothing ran. / 已回复指导意见，未执行。",
    FAILED: "Approved{by}, but it failed when it ran: {label}. / 已批准，但执行失败。",
    REFUSED: "Approved{by}, but refused when it was about to run: {label}; nothing ran. / 已批准，但执行前被拒绝，未执行。",
    PENDING: "You decided this request; waiting for other approvers. / 您已处理，等待其他审批人。"
  };

  function cards() { return list ? list.querySelectorAll("[data-request-id]") : []; }
  function idOf(el) { return el.getAttribute("data-request-id") || el.getAttribute("data-pane-for"); }
  function everyShown() { return document.querySelectorAll("[data-request-id], [data-pane-for]"); }

  function setCount(n) {
    nav.textContent = String(n);
    nav.classList.toggle("is-zero", n === 0);
    nav.setAttribute("title", n + " waiting for your decision / 待您审批");
    var tab = document.querySelector("[data-testid=tab-pending] .count");
    if (tab) { tab.textContent = String(n); }
  }

  function markEnded(card, item) {
    if (card.classList.contains("resolved")) { return; }
    card.classList.add("resolved");
    card.querySelectorAll("button, textarea").forEach(function (el) { el.disabled = true; });
    var by = item.decided_by ? " by " + item.decided_by : "";
    var text = (ENDED_TEXT[item.outcome] || (item.label + "{by}")).replace("{by}", by).replace("{label}", item.label);
    var banner = document.createElement("p");
    banner.className = "card-ended outcome-" + String(item.outcome).toLowerCase();
    banner.setAttribute("data-testid", "card-ended");
    banner.setAttribute("data-outcome", item.outcome);
    banner.setAttribute("role", "status");
    banner.textContent = text;
    var head = card.querySelector(".request-head");
    if (head) { head.insertAdjacentElement("afterend", banner); } else { banner.className += " row-ended"; card.appendChild(banner); }
    var countdown = card.querySelector(".countdown");
    if (countdown) { countdown.removeAttribute("data-expires-at"); countdown.textContent = item.label; }
  }

  function insertNew(ids) {
    // A fresh copy of the pending tab holds the new cards, drawn by the server as always.
    return fetch(window.location.pathname + "?rows_only=1", { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : ""; })
      .then(function (html) {
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var empty = document.querySelector(".empty");
        ids.slice().reverse().forEach(function (id) {
          var fresh = doc.querySelector('[data-request-id="' + id + '"]');
          if (!fresh || list.querySelector('[data-request-id="' + id + '"]')) { return; }
          fresh.classList.remove("is-open");
          fresh.classList.add("is-new");
          list.insertBefore(document.importNode(fresh, true), list.firstChild);
        });
        if (empty && cards().length) { empty.hidden = true; }
        if (window.APCountdown) { window.APCountdown.tick(); }
      });
  }

  function showClaim(card, item) {
    var slot = card.querySelector("[data-testid=row-claim]");
    if (!slot || item.claimed_by_me) { return; }
    slot.textContent = item.claimed_by ? "Being reviewed by " + item.claimed_by + " / 正在审阅" : "";
  }

  function apply(data) {
    setCount(data.pending_count);
    if (!list) { return; }
    var onPage = {};
    everyShown().forEach(function (card) { (onPage[idOf(card)] = onPage[idOf(card)] || []).push(card); });
    var missing = [];
    data.pending.forEach(function (item) {
      if (!onPage[item.id]) { missing.push(item.id); return; }
      onPage[item.id].forEach(function (card) {
        var quorum = card.querySelector("[data-testid=quorum]");
        if (quorum) { quorum.textContent = item.approvals + " / " + item.quorum; }
        var meter = card.querySelector("progress.meter");
        if (meter) { meter.value = item.approvals; meter.max = item.quorum; }
        showClaim(card, item);
      });
    });
    data.ended.forEach(function (item) {
      // "All open" also lists requests I approved that still wait for others: not ended there.
      if (item.outcome === "PENDING" && list.getAttribute("data-live") === "follow") { return; }
      (onPage[item.id] || []).forEach(function (card) { markEnded(card, item); });
    });
    if (missing.length && list.getAttribute("data-live") === "insert") { return insertNew(missing); }
  }

  function poll() {
    if (busy || document.hidden) { return; }
    busy = true;
    var ids = [];
    everyShown().forEach(function (card) {
      var id = idOf(card);
      if (!card.classList.contains("resolved") && ids.indexOf(id) < 0) { ids.push(id); }
    });
    var url = liveUrl + (list ? "?ids=" + encodeURIComponent(ids.join(",")) : "?count=1");
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { return data ? apply(data) : null; })
      .catch(function () { /* offline for a moment: the next poll tries again */ })
      .then(function () { busy = false; });
  }

  function start() { if (!timer) { timer = setInterval(poll, seconds * 1000); } }
  function stop() { if (timer) { clearInterval(timer); timer = null; } }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { stop(); } else { poll(); start(); }
  });
  window.APApprovalsLive = { poll: poll };
  start();
})();
