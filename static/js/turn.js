/* One assistant turn of the chat page, drawn from its run's events: tool steps as they start and
 * complete, a decision card per gated call (card.js), the streamed text and the final answer. A
 * turn of an earlier run, rebuilt after a reload, holds only its cards (`history`).
 * Exposes AP.Turn(host, runId, options); `host` is what the page lends a turn:
 *   {container, api, tokens (confirmation_id -> token), register(runId, turn), follow(turn), scrollDown()}.
 * People read tool titles and words; codes stay in data-code attributes.
 */
(function () {
  "use strict";

  var el = window.AP.el, errorText = window.AP.errorText, toolLabel = window.AP.toolLabel, Card = window.AP.Card;

  /* What a step that did not run says, by its code (the code stays in data-code). */
  var STEP_WORDS = {
    TOOL_NOT_FOUND: "not available to you / 您无法使用",
    PERMISSION_DENIED: "not allowed / 无权执行",
    INVALID_ARGUMENTS: "could not be read / 参数无效",
    REJECTED: "not done / 未执行", CONFIRMATION_EXPIRED: "expired / 已过期", WITHDRAWN: "withdrawn / 已撤回",
    SUPERSEDED: "replaced / 已被取代", APPROVER_GUIDANCE: "guidance received / 收到指导意见",
    RUN_CANCELLED: "stopped / 已停止", TOOL_STOPPED: "stopped by an administrator / 已被管理员停用",
    POLICY_DENIED: "not allowed by policy / 策略不允许", LIMIT_EXCEEDED: "limit reached / 已达上限"
  };
  /* What a run that stopped on an error says, by its code. */
  var ERROR_WORDS = {
    PERMISSION_DENIED: "You are not allowed to do this. / 您无权执行此操作。",
    MODEL_UNAVAILABLE: "The model is not answering right now; please try again later. / 模型暂时无法响应，请稍后重试。",
    MAX_ITERATIONS: "The assistant took too many steps and stopped. / 助手步骤过多，已停止。"
  };

  /* One assistant turn on screen: tool steps, confirmation cards, streamed text, final answer.
     options.history: a turn of an earlier run, rebuilt from stored state (cards only, no status). */
  function Turn(host, runId, options) {
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
    if (options && options.history) {
      this.done = true;
      this.row.classList.add("history");
      this.draft.className = "";  // no answer of its own: the stored answer follows as a message
      this.setStatus("");
      this.stopButton.style.display = "none";
    }
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
      row.setAttribute("data-tool", tool);
      row.appendChild(el("span", "step-name", toolLabel(tool)));
      row.appendChild(el("span", "step-state", ""));
      this.steps.appendChild(row);
      this.stepRows[callId] = row;
    }
    return row;
  };

  Turn.prototype.stepState = function (callId, tool, kind, text, code) {
    var row = this.step(callId, tool);
    row.className = "step " + kind;
    row.querySelector(".step-state").textContent = text;
    if (code) { row.setAttribute("data-code", code); }
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
        this.setStatus("Running: " + toolLabel(payload.tool) + "… / 执行中");
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
          payload.success ? "done / 完成" : (STEP_WORDS[payload.code] || "not done / 未完成"), payload.code);
        var card = this.cardsById[payload.tool_call_id];
        if (card) { card.settle(payload.success, payload.code); }
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
        var words = payload.code === "PERMISSION_DENIED" && payload.message  // it names what is missing
          ? "You are not allowed to do this / 您无权执行此操作: " + payload.message
          : ERROR_WORDS[payload.code] || payload.message || "Something went wrong. / 出错了。";
        var error = el("div", "turn-error", words);
        error.setAttribute("data-code", payload.code || "");
        this.bubble.appendChild(error);
        this.setStatus("");
        break;
      case "DONE":
        this.done = true;
        this.stopButton.style.display = "none";
        if (payload.status === "CANCELLED") {
          var stopped = this.cardsById;
          Object.keys(stopped).forEach(function (id) {
            if (!stopped[id].settled) { stopped[id].settle(false, "RUN_CANCELLED"); }
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
    // The server's sentence names the tool by its wire name: people read its title instead.
    var title = toolLabel(r.tool).split(" / "), en = r.message || "", zh = r.message_zh || "";
    if (r.tool) {
      en = en.split(r.tool).join(title[0]);
      zh = zh.split(r.tool).join(title[1] || title[0]);
    }
    var note = el("p", "note regate-note", en + (zh ? " / " + zh : ""));
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

  window.AP.Turn = Turn;
})();
