/* The audit page's Verify button: asks /audit/verify/?after=N for one bounded step of the chain
   check after another, showing progress, until the server says it is done; then names the head
   hash, or the first row that does not fit. */
(function () {
  "use strict";
  // the filters stay open on a wide screen; on a phone they fold under "Filters" unless one is set
  var filters = document.querySelector("[data-testid=more-filters]");
  if (filters && window.matchMedia("(min-width: 761px)").matches) filters.open = true;
  var button = document.querySelector("[data-verify-url]");
  if (!button) return;
  var panel = document.querySelector("[data-testid=verify-panel]");
  var bar = panel.querySelector("progress");
  var status = panel.querySelector("[data-testid=verify-status]");

  function show(text, tone) {
    status.textContent = text;
    status.classList.toggle("is-ok", tone === "ok");
    status.classList.toggle("is-bad", tone === "bad");
  }

  function step(after) {
    return fetch(button.dataset.verifyUrl + "?after=" + after, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (report) {
        bar.max = Math.max(report.head_seq, 1);
        bar.value = Math.min(report.checked_through, bar.max);
        if (!report.ok) {
          show("Broken: " + report.problem + " / 校验失败", "bad");
          return;
        }
        if (report.done) {
          bar.value = bar.max;
          show("The chain holds: " + report.checked_through + " rows checked; head hash " + (report.head_hash || "–") + " / 校验通过", "ok");
          return;
        }
        show("Checked " + report.checked_through + " of " + report.head_seq + " rows… / 校验中", "");
        return step(report.checked_through);
      });
  }

  button.addEventListener("click", function () {
    panel.hidden = false;
    button.disabled = true;
    bar.value = 0;
    show("Checking… / 校验中", "");
    step(0).catch(function (error) {
      show("The check could not finish (" + error.message + "). Try again. / 校验未完成，请重试。", "bad");
    }).then(function () { button.disabled = false; });
  });
})();
