/* Keyboard shortcuts of the approver's inbox (no dependencies).
 *
 *   j / k      move to the next / previous request in the list
 *   Enter, o   open the current request in the pane
 *   a          approve the request open in the pane (opens the current one first if none is)
 *   r          reject the open request: shows its reason box (a reason is required; Ctrl+Enter sends)
 *   /          search
 *
 * Never while typing in a field, nor with Ctrl, Alt or Meta held. The server re-checks every
 * decision; these keys only press the page's own buttons.
 */
(function () {
  "use strict";

  var current = -1;

  function rows() { return Array.prototype.slice.call(document.querySelectorAll(".inbox-list [data-request-id]")); }
  function pane() { return document.querySelector("[data-pane-for]"); }

  function typing(el) {
    if (!el || !el.tagName) { return false; }
    var tag = el.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || el.isContentEditable;
  }

  function highlight(index) {
    var list = rows();
    if (!list.length) { return; }
    current = Math.max(0, Math.min(index, list.length - 1));
    list.forEach(function (row, i) { row.classList.toggle("is-current", i === current); });
    list[current].scrollIntoView({ block: "nearest" });
    var link = list[current].querySelector("[data-testid=row-open]");
    if (link) { link.focus({ preventScroll: true }); }
  }

  function openCurrent() {
    var list = rows();
    if (current < 0 || !list[current]) { return false; }
    window.location.assign(list[current].getAttribute("data-open-url"));
    return true;
  }

  function enabled(button) { return button && !button.disabled; }

  function approve() {
    var open = pane();
    var button = open && open.querySelector("[data-testid=approve]");
    if (enabled(button)) { button.closest("form").requestSubmit(button); return; }
    if (!open) { openCurrent(); }
  }

  function reject() {
    var open = pane();
    var reason = open && open.querySelector("textarea[name=reason]");
    if (reason && !reason.disabled) {
      reason.scrollIntoView({ block: "center" });
      reason.focus();
      return;
    }
    if (!open) { openCurrent(); }
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey && event.key === "Enter" && event.target.name === "reason") {
      var form = event.target.closest("form");
      if (form && event.target.value.trim()) { event.preventDefault(); form.requestSubmit(); }
      return;
    }
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) { return; }
    var key = event.key;
    if (key === "j") { highlight(current + 1); } else if (key === "k") { highlight(current - 1); } else if (key === "o" || (key === "Enter" && !event.target.closest("a, button, summary"))) {
      if (!openCurrent()) { return; }
    } else if (key === "a") { approve(); } else if (key === "r") { reject(); } else if (key === "/") {
      var search = document.querySelector("[data-testid=search]");
      if (!search) { return; }
      var details = search.closest("details");
      if (details) { details.open = true; }
      search.focus();
    } else { return; }
    event.preventDefault();
  });

  // Start on the open request's line, so j / k move from where the approver is.
  var list = rows();
  list.forEach(function (row, i) { if (row.classList.contains("is-open")) { current = i; } });
  if (current >= 0) { list[current].classList.add("is-current"); }
})();
