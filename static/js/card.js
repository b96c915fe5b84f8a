/* A decision card of the chat: one gated call (risk, what it does, facts, expiry countdown),
 * Confirm / Cancel for the requester's own calls or the approvals so far, and, once it ended, what
 * became of it in words: who decided, their reason or comment, and the call that ran (an edit as
 * old → new). The words come from the server's card (GET conversations/{id}/ `cards`, GET
 * runs/{id}/ `cards`): a live card asks for it when the run says the call ended, a card rebuilt
 * after a reload starts from it, so both read the same. Codes stay in data-* attributes.
 * Exposes AP.Card(turn, p), AP.toolLabel(name), AP.timeText(iso). Needs api.js first.
 */
(function () {
  "use strict";

  var el = window.AP.el, listOf = window.AP.listOf, errorText = window.AP.errorText;

  var RISK_LABELS = { LOW: "LOW 低", MEDIUM: "MEDIUM 中", HIGH: "HIGH 高", CRITICAL: "CRITICAL 极高" };
  var FACT_LABELS = {
    order_status: "Order status / 订单状态", order_total: "Order total / 订单金额",
    already_refunded: "Already refunded / 已退款", refundable_remainder: "Refundable / 可退余额",
    refund_amount: "This refund / 本次退款", shipped: "Shipped / 已发货", items: "Items / 商品"
  };
  var ASSISTANT_TEXT_CAP = 280;
  var labels = null;

  /* The title people read for a tool (the page's #tool-labels, else its name made readable:
     "logistics__track_shipment" -> "Track shipment", as tools.display.humanize). */
  function toolLabel(name) {
    if (labels === null) {
      var node = document.getElementById("tool-labels");
      try { labels = node ? JSON.parse(node.textContent) : {}; } catch (e) { labels = {}; }
    }
    if (labels[name]) { return labels[name]; }
    var bare = String(name || "").split("__").pop().replace(/_/g, " ").trim();
    return bare.charAt(0).toUpperCase() + bare.slice(1);
  }

  /* Every time the chat shows: "2026-12-02 14:05" in the browser's time zone (docs/pages.md). */
  function timeText(iso) {
    var d = new Date(iso);
    if (!iso || isNaN(d.getTime())) { return ""; }
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes());
  }

  function factText(v) {
    if (v && typeof v === "object" && !Array.isArray(v)) { return v.display || JSON.stringify(v); }
    if (typeof v === "boolean") { return v ? "Yes / 是" : "No / 否"; }
    if (Array.isArray(v)) {
      return v.length ? v.map(function (x) { return x && typeof x === "object" ? (x.name || x.sku || "") + (x.quantity ? " × " + x.quantity : "") : String(x); }).join(", ") : "none recorded / 无记录";
    }
    return String(v);
  }

  /* The tool's facts beside the summary: the ones a requester can act on. */
  function factList(facts) {
    var list = el("dl", "card-facts");
    list.setAttribute("data-testid", "card-facts");
    Object.keys(FACT_LABELS).forEach(function (name) {
      if (!facts || !(name in facts)) { return; }
      var row = el("div", "");
      row.appendChild(el("dt", "", FACT_LABELS[name]));
      row.appendChild(el("dd", "", factText(facts[name])));
      list.appendChild(row);
    });
    return list.childNodes.length ? list : null;
  }

  /* Free text the model wrote (a reason): quoted, capped, labelled as the assistant's. */
  function appendAssistantText(node, texts) {
    if (!texts) { return; }
    Object.keys(texts).forEach(function (name) {
      var text = String(texts[name]);
      var box = el("figure", "assistant-text");
      box.setAttribute("data-testid", "assistant-text");
      var field = name === "reason" ? "reason / 原因" : name.replace(/_/g, " ");
      box.appendChild(el("figcaption", "", "Written by the assistant / 由助手撰写 · " + field));
      var cut = text.length > ASSISTANT_TEXT_CAP;
      box.appendChild(el("blockquote", "", "“" + text.slice(0, ASSISTANT_TEXT_CAP) + (cut ? "…" : "") + "”"));
      node.appendChild(box);
    });
  }

  function Card(turn, p) {
    var self = this;
    this.turn = turn;
    this.confirmationId = p.confirmation_id;
    this.toolCallId = p.tool_call_id;
    this.needs = p.needs;
    this.quorum = p.quorum || 1;
    var risk = String(p.risk || "").toLowerCase();
    this.node = el("div", "confirm-card risk-" + risk);
    this.node.setAttribute("data-confirmation-id", p.confirmation_id);
    this.node.setAttribute("data-testid", "confirmation-card");
    var head = el("div", "card-head");
    head.appendChild(el("span", "badge badge-risk risk-" + risk, RISK_LABELS[p.risk] || p.risk));
    head.appendChild(el("span", "card-tool", p.tool_label || toolLabel(p.tool)));
    var countdown = el("span", "countdown", "");
    countdown.setAttribute("data-expires-at", p.expires_at);
    head.appendChild(countdown);
    this.node.appendChild(head);
    this.node.appendChild(el("p", "card-summary", p.summary));
    var facts = factList(p.facts);
    if (facts) { this.node.appendChild(facts); }
    appendAssistantText(this.node, p.written_by_assistant);
    if (p.regated) {
      // The full sentence is in the conversation (Turn.regateNote); the card names the new state.
      this.node.setAttribute("data-regated", p.regated.cause || "yes");
      var back = el("p", "card-reason", "Sent back to approvers: the policy became stricter. / 策略变得更严格，已转交审批人。");
      back.setAttribute("data-testid", "card-reason");
      this.node.appendChild(back);
    } else if (p.reason) {
      var why = el("p", "card-reason", "Why it waits again / 再次等待原因: " + p.reason);
      why.setAttribute("data-testid", "card-reason");
      this.node.appendChild(why);
    }
    this.statusLine = el("p", "card-status", "");
    this.statusLine.setAttribute("data-testid", "card-status");
    this.actions = el("div", "card-actions");
    if (p.needs === "requester") {
      this.confirmButton = el("button", "btn btn-approve", "Confirm / 确认");
      this.confirmButton.type = "button";
      this.confirmButton.setAttribute("data-testid", "confirm");
      this.cancelButton = el("button", "btn btn-ghost", "Cancel / 取消");
      this.cancelButton.type = "button";
      this.cancelButton.setAttribute("data-testid", "cancel");
      this.confirmButton.addEventListener("click", function () { self.decide("confirm"); });
      this.cancelButton.addEventListener("click", function () { self.decide("cancel"); });
      this.actions.appendChild(this.confirmButton);
      this.actions.appendChild(this.cancelButton);
      this.statusLine.textContent = "Only you can confirm this call. / 仅您本人可以确认。";
    } else {
      // Approvals that still count after a regate start the count; the run API keeps it current.
      var counted = p.regated && typeof p.regated.approvals === "number" ? p.regated.approvals : 0;
      this.showWaiting(counted, this.quorum);
      if (!p.rebuilt) {
        this.poll = setInterval(function () { self.refresh(); }, 4000);
        this.refresh();
      }
    }
    this.node.appendChild(this.statusLine);
    this.node.appendChild(this.actions);
    window.APCountdown && window.APCountdown.tick();
  }

  Card.prototype.showWaiting = function (count, quorum) {
    this.statusLine.textContent = "";
    this.approvals = el("span", "approvals-count", count + " / " + quorum);
    this.approvals.setAttribute("data-testid", "approvals-count");
    this.statusLine.appendChild(document.createTextNode("Waiting for approvers / 等待审批人: "));
    this.statusLine.appendChild(this.approvals);
    this.statusLine.appendChild(document.createTextNode(" approved / 已批准"));
  };

  Card.prototype.setStatus = function (text, kind) {
    this.statusLine.textContent = text;
    this.statusLine.className = "card-status" + (kind ? " " + kind : "");
  };

  Card.prototype.stopPolling = function () {
    if (this.poll) { clearInterval(this.poll); this.poll = null; }
  };

  Card.prototype.resolve = function (text, kind) {
    this.stopPolling();
    this.node.classList.add("resolved");
    this.node.classList.remove("ok", "failed");
    if (kind) { this.node.classList.add(kind); }
    this.actions.textContent = "";
    var countdown = this.node.querySelector(".countdown");
    if (countdown) { countdown.remove(); }
    this.setStatus(text, kind);
  };

  /* Draw the server's card `c` (agentplatform.runtime.cards): the call as it runs or ran, the
     edit old → new, each reviewer's decision and comment, and the status in words. */
  Card.prototype.apply = function (c) {
    if (!c) { return; }
    // data-outcome: the run's code when the stream told it (settle), else the stored one.
    this.node.setAttribute("data-result", c.outcome);
    if (!this.streamed) { this.node.setAttribute("data-outcome", c.outcome_code || c.outcome); }
    this.node.setAttribute("data-state", c.state);
    var summary = this.node.querySelector(".card-summary");
    if (summary && c.summary) { summary.textContent = c.summary; }
    var old = this.node.querySelector(".card-facts"), facts = factList(c.facts);
    if (old && facts) { old.parentNode.replaceChild(facts, old); }
    else if (facts) { this.node.insertBefore(facts, summary.nextSibling); }
    this.node.querySelectorAll(".card-edited, .card-decisions, .card-time").forEach(function (n) { n.remove(); });
    if (c.edit_text) {
      var edited = el("p", "card-edited", c.edit_text);
      edited.setAttribute("data-testid", "card-edited");
      this.node.insertBefore(edited, this.statusLine);
    }
    var said = (c.decisions || []).filter(function (d) { return d.comment || c.state !== "pending"; });
    if (said.length) {
      var list = el("ul", "card-decisions");
      list.setAttribute("data-testid", "card-decisions");
      said.forEach(function (d) {
        var item = el("li", "", d.name + " — " + d.decision_text + (d.comment ? ": “" + d.comment + "”" : ""));
        item.appendChild(el("time", "card-when", " · " + timeText(d.at)));
        list.appendChild(item);
      });
      this.node.insertBefore(list, this.statusLine);
    }
    if (c.state === "pending") {
      this.settled = false;
      if (c.needs === "approvers") { this.showWaiting(c.approvals, c.quorum); }
      return;
    }
    this.settled = true;
    this.resolve(c.status_text, c.state === "ok" ? "ok" : "failed");
    if (c.decided_at) {
      var when = el("p", "card-time", "Decided / 决定于 " + timeText(c.decided_at));
      when.setAttribute("data-testid", "card-time");
      this.node.appendChild(when);
    }
  };

  /* The run's stream says this call ended: show it at once, then the server's card. */
  Card.prototype.settle = function (success, code) {
    this.settled = true;  // the run's own word: a late answer to our POST must not overwrite it
    this.streamed = true;
    this.node.setAttribute("data-outcome", code || (success ? "OK" : ""));
    this.resolve(success ? "Done — it ran once. / 已执行。" : "Not done — nothing was done / 未执行.",
                 success ? "ok" : "failed");
    this.refresh();
  };

  /* Ask the run for this card (the approvals so far, or how it ended) and draw it. */
  Card.prototype.refresh = function () {
    var self = this;
    if (!this.turn.runId) { return; }
    this.turn.host.api("GET", "runs/" + encodeURIComponent(this.turn.runId) + "/").then(function (run) {
      if (self.replaced) { return; }
      var card = listOf(run && run.cards).filter(function (c) { return c.confirmation_id === self.confirmationId; })[0];
      if (!card) { return; }
      if (card.state === "pending" && (self.settled || card.needs !== self.needs)) { return; }
      self.apply(card);
    }).catch(function () { /* a convenience; the stream carries the outcome */ });
  };

  Card.prototype.token = function () {
    var known = this.turn.host.tokens[this.confirmationId];
    if (known) { return Promise.resolve(known); }
    // The token from the chat response is not on this page (reload, or a worker minted it).
    return this.turn.host.api("POST", "confirmations/" + encodeURIComponent(this.confirmationId) + "/token/", {})
      .then(function (data) { return data.token; });
  };

  Card.prototype.decide = function (action) {
    var self = this, host = this.turn.host;
    this.confirmButton.disabled = this.cancelButton.disabled = true;
    this.setStatus(action === "confirm" ? "Confirming… / 确认中" : "Cancelling… / 取消中");
    this.token().then(function (token) {
      return host.api("POST", "confirmations/" + action + "/", { token: token });
    }).then(function () {
      delete host.tokens[self.confirmationId];
      // With eager Celery the resumed run's events may already be on screen (a settled card, or
      // this card replaced by one that waits for approvers again).
      if (!self.settled && !self.replaced) {
        if (action === "confirm") {
          self.resolve("Confirmed — running… / 已确认，执行中", "ok");
          self.turn.setStatus("Running… / 执行中");
        } else {
          self.resolve("Cancelled — nothing was done / 未执行. You declined it. / 您已拒绝。", "failed");
        }
      }
      host.follow(self.turn);
    }).catch(function (error) {
      delete host.tokens[self.confirmationId];
      if (error.code === "ALREADY_DECIDED" || error.code === "CONFIRMATION_EXPIRED") {
        if (!self.settled) { self.resolve(errorText(error), "failed"); }
        host.follow(self.turn);
        self.refresh();
      } else {
        self.setStatus(errorText(error), "failed");
        self.confirmButton.disabled = self.cancelButton.disabled = false;
      }
    });
  };

  window.AP.Card = Card;
  window.AP.toolLabel = toolLabel;
  window.AP.timeText = timeText;
})();
