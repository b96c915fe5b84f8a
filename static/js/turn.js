/* One assistant turn of the chat page, drawn from its run's events: tool steps as they start and
 * complete, a confirmation card per gated call (risk, summary, expiry countdown, Confirm / Cancel
 * for the requester or the approvals so far), the streamed text and the final answer.
 * Exposes AP.Turn(host, runId); `host` is what the page lends a turn:
 *   {container, api, tokens (confirmation_id -> token), register(runId, turn), follow(turn), scrollDown()}.
 */
(function () {
  "use strict";

  var el = window.AP.el, listOf = window.AP.listOf, errorText = window.AP.errorText;

  var TOOL_LABELS = {
    query_inventory: "Inventory lookup / 库存查询",
    list_orders: "List orders / 订单列表",
    cancel_order: "Cancel order / 取消订单",
    refund_order: "Refund / 退款"
  };
  var RISK_LABELS = { LOW: "LOW 低", MEDIUM: "MEDIUM 中", HIGH: "HIGH 高", CRITICAL: "CRITICAL 极高" };

  /* One assistant turn on screen: tool steps, confirmation cards, streamed text, final answer. */
  function Turn(host, runId) {
    this.host = host;
    this.runId = runId || null;
    this.lastSeq = 0;
    this.row = el("div", "msg msg-assistant turn");
    this.row.setAttribute("data-testid", "turn");
    this.bubble = el("div", "bubble");
    this.steps = el("ul", "steps");
    this.cards = el("div", "cards");
    this.notes = el("div", "notes");
    this.draft = el("div", "answer streaming");
    this.status = el("div", "turn-status", "Thinking… / 思考中");
    this.bubble.appendChild(this.steps);
    this.bubble.appendChild(this.cards);
    this.bubble.appendChild(this.notes);
    this.bubble.appendChild(this.draft);
    this.bubble.appendChild(this.status);
    // Stop the run (it and its waiting requests are cancelled, audited); shown until it is done.
    this.stopButton = el("button", "btn btn-ghost btn-small", "Stop this run / 停止");
    this.stopButton.type = "button";
    this.stopButton.setAttribute("data-testid", "stop-run");
    this.stopButton.style.display = runId ? "" : "none";  // .btn sets display, so `hidden` would not hide it
    var self = this;
    this.stopButton.addEventListener("click", function () { self.stop(); });
    this.bubble.appendChild(this.stopButton);
    this.row.appendChild(this.bubble);
    this.stepRows = {};
    this.cardsById = {};
    host.container.appendChild(this.row);
    if (runId) { host.register(runId, this); }
    host.scrollDown();
  }

  Turn.prototype.setRun = function (runId) {
    this.runId = runId;
    this.host.register(runId, this);
    if (!this.done) { this.stopButton.style.display = ""; }
  };

  Turn.prototype.stop = function () {
    var self = this;
    if (!this.runId) { return; }
    this.stopButton.disabled = true;
    this.host.api("POST", "runs/" + encodeURIComponent(this.runId) + "/cancel/", {}).then(function () {
      self.host.follow(self);
    }).catch(function (error) {
      self.stopButton.disabled = false;
      self.setStatus(errorText(error), "failed");
    });
  };

  /* Stop the timers of this turn's cards (the turn left the screen). */
  Turn.prototype.dispose = function () {
    var cards = this.cardsById;
    Object.keys(cards).forEach(function (id) { cards[id].stopPolling(); });
  };

  Turn.prototype.setStatus = function (text, kind) {
    this.status.textContent = text || "";
    this.status.className = "turn-status" + (kind ? " " + kind : "");
    this.status.hidden = !text;
  };

  Turn.prototype.freezeDraft = function () {
    if (this.draft.textContent) {
      this.notes.appendChild(el("p", "note", this.draft.textContent));
      this.draft.textContent = "";
    }
  };

  Turn.prototype.step = function (callId, tool) {
    var row = this.stepRows[callId];
    if (!row) {
      row = el("li", "step running");
      row.setAttribute("data-tool-call-id", callId);
      row.appendChild(el("span", "step-icon", ""));
      row.appendChild(el("span", "step-name", TOOL_LABELS[tool] || tool));
      row.appendChild(el("span", "step-state", ""));
      this.steps.appendChild(row);
      this.stepRows[callId] = row;
    }
    return row;
  };

  Turn.prototype.stepState = function (callId, tool, kind, text) {
    var row = this.step(callId, tool);
    row.className = "step " + kind;
    row.querySelector(".step-state").textContent = text;
  };

  Turn.prototype.handle = function (type, payload, seq) {
    if (seq && seq <= this.lastSeq) { return; }  // already shown (replay after a reconnect)
    if (seq) { this.lastSeq = seq; }
    switch (type) {
      case "MODEL_TEXT":
        this.draft.textContent += payload.text || "";
        this.setStatus("Writing… / 生成中");
        break;
      case "TOOL_CALL_STARTED":
        this.freezeDraft();
        this.stepState(payload.tool_call_id, payload.tool, "running", "running… / 执行中");
        this.setStatus("Running " + payload.tool + "… / 执行工具");
        break;
      case "CONFIRMATION_REQUIRED":
        this.stepState(payload.tool_call_id, payload.tool, "waiting",
          payload.needs === "approvers" ? "waiting for approvers / 等待审批" : "needs your confirmation / 待确认");
        if (payload.regated) { this.regateNote(payload.regated); }
        this.card(payload);
        this.setStatus(payload.needs === "approvers"
          ? "Waiting for approvers… / 等待审批人" : "Waiting for your confirmation… / 等待您的确认", "waiting");
        break;
      case "TOOL_EXECUTION_COMPLETED":
        this.stepState(payload.tool_call_id, payload.tool, payload.success ? "ok" : "failed",
          payload.success ? "done / 完成" : (payload.code || "failed"));
        var card = this.cardsById[payload.tool_call_id];
        if (card) { card.settle(payload.success, payload.code, payload); }
        this.setStatus("Thinking… / 思考中");
        break;
      case "FINAL_TEXT":
        this.draft.textContent = payload.text || "";
        this.draft.classList.remove("streaming");
        this.draft.classList.add("final");
        this.draft.setAttribute("data-testid", "final-answer");
        this.setStatus("");
        break;
      case "ERROR":
        this.freezeDraft();
        this.bubble.appendChild(el("div", "turn-error", (payload.message || "error") + " (" + payload.code + ")"));
        this.setStatus("");
        break;
      case "DONE":
        this.done = true;
        this.stopButton.style.display = "none";
        if (payload.status === "CANCELLED") {
          var stopped = this.cardsById;
          Object.keys(stopped).forEach(function (id) {
            if (!stopped[id].settled) { stopped[id].settle(false, "RUN_CANCELLED", {}); }
          });
        }
        this.draft.classList.remove("streaming");
        if (payload.status === "FAILED") { this.row.classList.add("failed"); }
        this.setStatus("");
        break;
    }
    this.host.scrollDown();
  };

  /* A decided call went back to approvers because its policy became stricter: say so in words,
   * in both languages, where the conversation is read (the card says it too). */
  Turn.prototype.regateNote = function (r) {
    this.freezeDraft();
    var note = el("p", "note regate-note", (r.message || "") + (r.message_zh ? " / " + r.message_zh : ""));
    note.setAttribute("data-testid", "regate-note");
    note.setAttribute("role", "status");
    this.notes.appendChild(note);
  };

  Turn.prototype.card = function (p) {
    var existing = this.cardsById[p.tool_call_id];
    if (existing && !p.regated && existing.confirmationId === p.confirmation_id && existing.needs === p.needs) {
      return existing;
    }
    var card = new Card(this, p);
    this.cardsById[p.tool_call_id] = card;
    if (existing && existing.node.parentNode) {
      // The same call waits again under a stricter policy: the new card replaces the old one
      // (which may say "Confirmed" or show a reached quorum).
      existing.replaced = true;
      existing.stopPolling();
      existing.node.parentNode.replaceChild(card.node, existing.node);
    } else {
      this.cards.appendChild(card.node);
    }
    return card;
  };

  // -- confirmation cards ----------------------------------------------------------------------

  var FACT_LABELS = {
    order_status: "Order status / 订单状态", order_total: "Order total / 订单金额",
    already_refunded: "Already refunded / 已退款", refundable_remainder: "Refundable / 可退余额",
    refund_amount: "This refund / 本次退款", shipped: "Shipped / 已发货", items: "Items / 商品"
  };
  var ASSISTANT_TEXT_CAP = 280;

  function factText(v) {
    if (v && typeof v === "object" && !Array.isArray(v)) { return v.display || JSON.stringify(v); }
    if (typeof v === "boolean") { return v ? "Yes / 是" : "No / 否"; }
    if (Array.isArray(v)) { return v.length ? v.join(", ") : "none recorded / 无记录"; }
    return String(v);
  }

  /* The tool's facts beside the summary (issue 13 item 1): the ones a requester can act on. */
  function appendFacts(node, facts) {
    if (!facts) { return; }
    var list = el("dl", "card-facts");
    list.setAttribute("data-testid", "card-facts");
    Object.keys(FACT_LABELS).forEach(function (name) {
      if (!(name in facts)) { return; }
      var row = el("div", "");
      row.appendChild(el("dt", "", FACT_LABELS[name]));
      row.appendChild(el("dd", "", factText(facts[name])));
      list.appendChild(row);
    });
    if (list.childNodes.length) { node.appendChild(list); }
  }

  /* Free text the model wrote (a reason): quoted, capped, labelled as the assistant's (item 7). */
  function appendAssistantText(node, texts) {
    if (!texts) { return; }
    Object.keys(texts).forEach(function (name) {
      var text = String(texts[name]);
      var box = el("figure", "assistant-text");
      box.setAttribute("data-testid", "assistant-text");
      box.appendChild(el("figcaption", "", "Written by the assistant / 由助手撰写 · " + name));
      var cut = text.length > ASSISTANT_TEXT_CAP;
      box.appendChild(el("blockquote", "", "“" + text.slice(0, ASSISTANT_TEXT_CAP) + (cut ? "…" : "") + "”"));
      node.appendChild(box);
    });
  }

  function Card(turn, p) {
    var self = this;
    this.turn = turn;
    this.confirmationId = p.confirmation_id;
    this.needs = p.needs;
    this.quorum = p.quorum || 1;
    this.node = el("div", "confirm-card risk-" + String(p.risk || "").toLowerCase());
    this.node.setAttribute("data-confirmation-id", p.confirmation_id);
    this.node.setAttribute("data-testid", "confirmation-card");
    var head = el("div", "card-head");
    head.appendChild(el("span", "badge badge-risk risk-" + String(p.risk || "").toLowerCase(), RISK_LABELS[p.risk] || p.risk));
    head.appendChild(el("span", "card-tool", TOOL_LABELS[p.tool] || p.tool));
    var countdown = el("span", "countdown", "");
    countdown.setAttribute("data-expires-at", p.expires_at);
    head.appendChild(countdown);
    this.node.appendChild(head);
    this.node.appendChild(el("p", "card-summary", p.summary));
    appendFacts(this.node, p.facts);
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
      this.approvals = el("span", "approvals-count", counted + " / " + this.quorum);
      this.approvals.setAttribute("data-testid", "approvals-count");
      this.statusLine.appendChild(document.createTextNode("Waiting for approvers / 等待审批人: "));
      this.statusLine.appendChild(this.approvals);
      this.statusLine.appendChild(document.createTextNode(" approved"));
      this.poll = setInterval(function () { self.refreshApprovals(); }, 4000);
      this.refreshApprovals();
    }
    this.node.appendChild(this.statusLine);
    this.node.appendChild(this.actions);
    window.APCountdown && window.APCountdown.tick();
  }

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
    if (kind) { this.node.classList.add(kind); }
    this.actions.textContent = "";
    var countdown = this.node.querySelector(".countdown");
    if (countdown) { countdown.remove(); }
    this.setStatus(text, kind);
  };

  Card.prototype.settle = function (success, code, payload) {
    this.settled = true;  // the run's own word: a late answer to our POST must not overwrite it
    var who = payload && payload.decided_by, reason = payload && payload.reason;
    var edited = payload && payload.edited_by && payload.edited_by.length ? payload.edited_by.join(", ") : "";
    if (edited) { this.showEdited(payload, edited); }
    if (success) {
      this.resolve("Done — it ran once. / 已执行。" + (edited ? " Arguments edited by " + edited
        + " before it ran. / 审批人修改了参数。" : ""), "ok");
    }
    else if (code === "APPROVER_GUIDANCE") {
      this.resolve("An approver" + (who ? " (" + who.username + ")" : "") + " sent guidance instead — nothing was done."
        + " / 审批人给出了指导意见，未执行。" + (payload && payload.guidance ? " “" + payload.guidance + "”" : ""), "failed");
    }
    else if (code === "WITHDRAWN") { this.resolve("Withdrawn — nothing was done. / 已撤回，未执行。", "failed"); }
    else if (code === "REJECTED") {
      if (who && who.role === "approver") {
        this.resolve("Rejected by " + who.username + " — nothing was done. / 审批人已拒绝，未执行。"
          + (reason ? " Reason / 原因: " + reason : ""), "failed");
      } else if (who) {
        this.resolve("Cancelled — nothing was done. / 已取消，未执行。", "failed");
      } else {
        this.resolve("Cancelled — nothing was done. / 已取消，未执行。" + (reason ? " " + reason : ""), "failed");
      }
    }
    else if (code === "CONFIRMATION_EXPIRED") { this.resolve("Expired — nothing was done. / 已过期，未执行。", "failed"); }
    else if (code === "RUN_CANCELLED") { this.resolve("Run stopped — nothing was done. / 已停止，未执行。", "failed"); }
    else if (code === "SUPERSEDED") {
      this.resolve("Replaced by a newer request — nothing was done here. / 已被新的请求取代，未执行。", "failed");
    }
    else { this.resolve("Not done: " + code + (reason ? " — " + reason : "") + " / 未执行", "failed"); }
    if (this.node) { this.node.setAttribute("data-outcome", code || (success ? "OK" : "")); }
  };

  /* Approvers edited the call before it was decided: the card shows the call that was decided
     (its summary and facts, rebuilt by the tool from the edited arguments) and who changed what,
     instead of what was first asked. */
  Card.prototype.showEdited = function (payload, edited) {
    var summary = this.node.querySelector(".card-summary");
    if (summary && payload.summary) { summary.textContent = payload.summary; }
    var facts = this.node.querySelector(".card-facts");
    if (facts && payload.facts) {
      var holder = el("div", "");
      appendFacts(holder, payload.facts);
      if (holder.firstChild) { facts.parentNode.replaceChild(holder.firstChild, facts); } else { facts.remove(); }
    }
    var changes = (payload.changes || []).map(function (c) {
      return c.field + ": " + (c.from === null || c.from === undefined ? "—" : c.from) + " → "
        + (c.to === null || c.to === undefined ? "—" : c.to);
    }).join("; ");
    var line = el("p", "card-edited", "Edited by " + edited + (changes ? " (" + changes + ")" : "")
      + " / 审批人修改了参数");
    line.setAttribute("data-testid", "card-edited");
    var old = this.node.querySelector(".card-edited");
    if (old) { old.remove(); }
    this.node.insertBefore(line, this.statusLine);
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
          self.resolve("Cancelled — nothing will run. / 已取消，不会执行。", "failed");
        }
      }
      host.follow(self.turn);
    }).catch(function (error) {
      delete host.tokens[self.confirmationId];
      if (error.code === "ALREADY_DECIDED" || error.code === "CONFIRMATION_EXPIRED") {
        if (!self.settled) { self.resolve(errorText(error), "failed"); }
        host.follow(self.turn);
      } else {
        self.setStatus(errorText(error), "failed");
        self.confirmButton.disabled = self.cancelButton.disabled = false;
      }
    });
  };

  Card.prototype.refreshApprovals = function () {
    var self = this;
    if (!this.turn.runId) { return; }
    this.turn.host.api("GET", "runs/" + encodeURIComponent(this.turn.runId) + "/").then(function (run) {
      var pending = listOf(run && run.pending).filter(function (p) {
        return p.confirmation_id === self.confirmationId;
      })[0];
      var count = pending && (pending.approvals !== undefined ? pending.approvals : pending.approvals_count);
      if (typeof count === "number") { self.approvals.textContent = count + " / " + (pending.quorum || self.quorum); }
    }).catch(function () { /* the count is a convenience; the stream carries the outcome */ });
  };

  window.AP.Turn = Turn;
})();
