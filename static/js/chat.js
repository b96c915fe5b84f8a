/* The chat page (/chat/). Plain browser JavaScript, no build step, no third-party code.
 *
 * Talks to the REST API with the session cookie and the CSRF token:
 *   GET  conversations/            the list in the sidebar
 *   POST conversations/            a new conversation, created before its first message is sent
 *   GET  conversations/{id}/       the messages and the latest run of one conversation
 *   POST chat/                     {conversation_id, message} -> {conversation_id, run_id, status, pending}
 *                                  (blocks until the run answers or waits; while it blocks, the page
 *                                  finds the new run as the conversation's latest_run and streams it)
 *   GET  runs/{id}/events/         Server-Sent Events of a run (id = seq; replay with Last-Event-ID)
 *   GET  runs/{id}/                the run (fallback when the stream cannot be read; approval counts)
 *   POST confirmations/confirm/    {token}; POST confirmations/cancel/ {token}
 *   POST confirmations/{id}/token/ a fresh token for my own pending call (after a reload or a
 *                                  resume in a worker: the first token never reached this page)
 * Every answer and every tool step on screen comes from the run's event stream, so the page looks
 * the same whether the run was resumed in this request (eager Celery) or later by a worker.
 * Text is always inserted with textContent: nothing from the model or the API becomes HTML.
 */
(function () {
  "use strict";

  var root = document.getElementById("chat-app");
  if (!root) { return; }
  var API = root.getAttribute("data-api") || "/api/v1/";
  var els = {
    list: document.getElementById("conversation-list"),
    messages: document.getElementById("messages"),
    empty: document.getElementById("empty-state"),
    title: document.getElementById("conversation-title"),
    form: document.getElementById("composer"),
    input: document.getElementById("message-input"),
    send: document.getElementById("send-button"),
    newButton: document.getElementById("new-conversation")
  };
  var state = {
    conversationId: root.getAttribute("data-conversation-id") || null,
    tokens: {},       // confirmation_id -> raw token (only the requester's own, only in memory)
    streams: {},      // run_id -> EventSource
    turns: {},        // run_id -> Turn
    latestRunId: null, // newest run of the open conversation (to spot the next one)
    sending: false
  };

  var TOOL_LABELS = {
    query_inventory: "Inventory lookup / 库存查询",
    list_orders: "List orders / 订单列表",
    cancel_order: "Cancel order / 取消订单",
    refund_order: "Refund / 退款"
  };
  var RISK_LABELS = { LOW: "LOW 低", MEDIUM: "MEDIUM 中", HIGH: "HIGH 高", CRITICAL: "CRITICAL 极高" };
  var ERROR_TEXT = {
    CONFIRMATION_EXPIRED: "This confirmation expired; nothing was done. / 确认已过期，未执行。",
    ALREADY_DECIDED: "This call was already decided. / 该操作已处理。",
    CONFIRMATION_INVALID: "This confirmation is no longer valid. / 该确认已失效。",
    PERMISSION_DENIED: "You are not allowed to do this. / 您无权执行此操作。",
    NOT_AUTHENTICATED: "Your session ended; please sign in again. / 会话已结束，请重新登录。"
  };

  // -- helpers -------------------------------------------------------------------------------

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = text; }
    return node;
  }

  function api(method, path, body) {
    var headers = { "Accept": "application/json", "X-CSRFToken": csrfToken() };
    if (body !== undefined) { headers["Content-Type"] = "application/json"; }
    return fetch(API + path, {
      method: method, credentials: "same-origin", headers: headers,
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (response) {
      return response.text().then(function (raw) {
        var data = null;
        try { data = raw ? JSON.parse(raw) : null; } catch (e) { data = null; }
        if (!response.ok) {
          var error = new Error((data && data.message) || response.statusText || "request failed");
          error.code = (data && data.code) || "HTTP_" + response.status;
          error.status = response.status;
          error.retryable = !!(data && data.retryable);
          throw error;
        }
        return data;
      });
    });
  }

  function listOf(data) {
    if (Array.isArray(data)) { return data; }
    return (data && (data.results || data.items)) || [];
  }

  function errorText(error) {
    return ERROR_TEXT[error.code] || ((error.message || "Something went wrong") + " (" + (error.code || "ERROR") + ")");
  }

  function scrollDown() { els.messages.scrollTop = els.messages.scrollHeight; }

  function timeLabel(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) { return ""; }
    var today = new Date();
    return d.toDateString() === today.toDateString()
      ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      : d.toLocaleDateString([], { month: "short", day: "numeric" });
  }

  // -- conversation list ---------------------------------------------------------------------

  function renderConversations(items) {
    els.list.textContent = "";
    if (!items.length) {
      els.list.appendChild(el("li", "muted small", "No conversations yet. / 暂无对话"));
      return;
    }
    items.forEach(function (c) {
      var li = el("li");
      var button = el("button", "conversation" + (c.id === state.conversationId ? " active" : ""));
      button.type = "button";
      button.setAttribute("data-conversation-id", c.id);
      button.appendChild(el("span", "conversation-title", c.title || "Untitled / 未命名"));
      button.appendChild(el("span", "conversation-time", timeLabel(c.updated_at || c.created_at)));
      button.addEventListener("click", function () { openConversation(c.id); });
      li.appendChild(button);
      els.list.appendChild(li);
    });
  }

  function refreshConversations() {
    return api("GET", "conversations/").then(function (data) {
      var items = listOf(data);
      renderConversations(items);
      var current = items.filter(function (c) { return c.id === state.conversationId; })[0];
      if (current) { els.title.textContent = current.title || "Untitled / 未命名"; }
    }).catch(function (error) {
      els.list.textContent = "";
      els.list.appendChild(el("li", "muted small", errorText(error)));
    });
  }

  function setConversation(id) {
    state.conversationId = id;
    var url = new URL(window.location.href);
    if (id) { url.searchParams.set("c", id); } else { url.searchParams.delete("c"); }
    window.history.replaceState(null, "", url.toString());
    els.list.querySelectorAll(".conversation").forEach(function (b) {
      b.classList.toggle("active", b.getAttribute("data-conversation-id") === id);
    });
  }

  function closeStreams() {
    Object.keys(state.streams).forEach(function (runId) { state.streams[runId].close(); });
    state.streams = {};
    state.turns = {};
  }

  function clearMessages() {
    closeStreams();
    state.latestRunId = null;
    els.messages.textContent = "";
    els.messages.appendChild(els.empty);
    els.empty.hidden = false;
  }

  function openConversation(id) {
    clearMessages();
    setConversation(id);
    els.empty.hidden = true;
    return api("GET", "conversations/" + encodeURIComponent(id) + "/").then(function (data) {
      els.title.textContent = data.title || "Untitled / 未命名";
      (data.messages || []).forEach(function (m) {
        if (m.role === "user") { addUserMessage(m.content); }
        else if (m.role === "assistant" && m.content) { addAssistantMessage(m.content); }
      });
      // The latest run may still wait for a decision, or still be running (a worker resumes it):
      // replay its events from the start so its steps and confirmation cards show again.
      var run = data.latest_run;
      state.latestRunId = run ? run.id : null;
      if (run && (run.status === "AWAITING_CONFIRMATION" || run.status === "RUNNING")) {
        follow(run.id, new Turn(run.id));
      }
      scrollDown();
    }).catch(function (error) {
      setConversation(null);
      els.title.textContent = "New conversation / 新对话";
      els.empty.hidden = false;
      showBanner(error.status === 404 ? "That conversation was not found. / 未找到该对话。" : errorText(error));
    });
  }

  function showBanner(text) {
    var banner = el("div", "flash flash-error", text);
    banner.setAttribute("role", "alert");
    els.messages.insertBefore(banner, els.messages.firstChild);
  }

  // -- messages --------------------------------------------------------------------------------

  function addUserMessage(text) {
    els.empty.hidden = true;
    var row = el("div", "msg msg-user");
    row.appendChild(el("div", "bubble", text));
    els.messages.appendChild(row);
    scrollDown();
  }

  function addAssistantMessage(text) {
    els.empty.hidden = true;
    var row = el("div", "msg msg-assistant");
    row.appendChild(el("div", "bubble answer", text));
    els.messages.appendChild(row);
  }

  /* One assistant turn on screen: tool steps, confirmation cards, streamed text, final answer. */
  function Turn(runId) {
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
    this.row.appendChild(this.bubble);
    this.stepRows = {};
    this.cardsById = {};
    els.empty.hidden = true;
    els.messages.appendChild(this.row);
    if (runId) { state.turns[runId] = this; }
    scrollDown();
  }

  Turn.prototype.setRun = function (runId) {
    this.runId = runId;
    state.turns[runId] = this;
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
        this.card(payload);
        this.setStatus(payload.needs === "approvers"
          ? "Waiting for approvers… / 等待审批人" : "Waiting for your confirmation… / 等待您的确认", "waiting");
        break;
      case "TOOL_EXECUTION_COMPLETED":
        this.stepState(payload.tool_call_id, payload.tool, payload.success ? "ok" : "failed",
          payload.success ? "done / 完成" : (payload.code || "failed"));
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
        this.bubble.appendChild(el("div", "turn-error", (payload.message || "error") + " (" + payload.code + ")"));
        this.setStatus("");
        break;
      case "DONE":
        this.done = true;
        this.draft.classList.remove("streaming");
        if (payload.status === "FAILED") { this.row.classList.add("failed"); }
        this.setStatus("");
        break;
    }
    scrollDown();
  };

  Turn.prototype.card = function (p) {
    var existing = this.cardsById[p.tool_call_id];
    if (existing && existing.confirmationId === p.confirmation_id) { return existing; }
    var card = new Card(this, p);
    this.cardsById[p.tool_call_id] = card;
    this.cards.appendChild(card.node);
    return card;
  };

  // -- confirmation cards ----------------------------------------------------------------------

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
      this.approvals = el("span", "approvals-count", "0 / " + this.quorum);
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

  Card.prototype.resolve = function (text, kind) {
    if (this.poll) { clearInterval(this.poll); this.poll = null; }
    this.node.classList.add("resolved");
    if (kind) { this.node.classList.add(kind); }
    this.actions.textContent = "";
    var countdown = this.node.querySelector(".countdown");
    if (countdown) { countdown.remove(); }
    this.setStatus(text, kind);
  };

  Card.prototype.settle = function (success, code) {
    this.settled = true;  // the run's own word: a late answer to our POST must not overwrite it
    if (success) { this.resolve("Done — it ran once. / 已执行。", "ok"); }
    else if (code === "REJECTED") {
      this.resolve(this.needs === "requester" ? "Cancelled — nothing was done. / 已取消，未执行。"
        : "Rejected by an approver — nothing was done. / 审批人已拒绝，未执行。", "failed");
    }
    else if (code === "CONFIRMATION_EXPIRED") { this.resolve("Expired — nothing was done. / 已过期，未执行。", "failed"); }
    else { this.resolve("Not done: " + code + " / 未执行", "failed"); }
  };

  Card.prototype.token = function () {
    var known = state.tokens[this.confirmationId];
    if (known) { return Promise.resolve(known); }
    // The token from the chat response is not on this page (reload, or a worker minted it).
    return api("POST", "confirmations/" + encodeURIComponent(this.confirmationId) + "/token/", {})
      .then(function (data) { return data.token; });
  };

  Card.prototype.decide = function (action) {
    var self = this;
    this.confirmButton.disabled = this.cancelButton.disabled = true;
    this.setStatus(action === "confirm" ? "Confirming… / 确认中" : "Cancelling… / 取消中");
    this.token().then(function (token) {
      return api("POST", "confirmations/" + action + "/", { token: token });
    }).then(function () {
      delete state.tokens[self.confirmationId];
      // With eager Celery the resumed run's events may already be on screen (settled card).
      if (!self.settled) {
        if (action === "confirm") {
          self.resolve("Confirmed — running… / 已确认，执行中", "ok");
          self.turn.setStatus("Running… / 执行中");
        } else {
          self.resolve("Cancelled — nothing will run. / 已取消，不会执行。", "failed");
        }
      }
      ensureFollowing(self.turn);
    }).catch(function (error) {
      delete state.tokens[self.confirmationId];
      if (error.code === "ALREADY_DECIDED" || error.code === "CONFIRMATION_EXPIRED") {
        if (!self.settled) { self.resolve(errorText(error), "failed"); }
        ensureFollowing(self.turn);
      } else {
        self.setStatus(errorText(error), "failed");
        self.confirmButton.disabled = self.cancelButton.disabled = false;
      }
    });
  };

  Card.prototype.refreshApprovals = function () {
    var self = this;
    if (!this.turn.runId) { return; }
    api("GET", "runs/" + encodeURIComponent(this.turn.runId) + "/").then(function (run) {
      var pending = listOf(run && run.pending).filter(function (p) {
        return p.confirmation_id === self.confirmationId;
      })[0];
      var count = pending && (pending.approvals !== undefined ? pending.approvals : pending.approvals_count);
      if (typeof count === "number") { self.approvals.textContent = count + " / " + (pending.quorum || self.quorum); }
    }).catch(function () { /* the count is a convenience; the stream carries the outcome */ });
  };

  // -- following a run -----------------------------------------------------------------------

  var EVENT_TYPES = ["MODEL_TEXT", "TOOL_CALL_STARTED", "CONFIRMATION_REQUIRED", "TOOL_EXECUTION_COMPLETED",
                     "FINAL_TEXT", "ERROR", "DONE"];

  function follow(runId, turn) {
    if (state.streams[runId] || (turn.runId === runId && turn.done)) { return; }
    turn.setRun(runId);
    // A first connection cannot send Last-Event-ID; the API takes it as a query parameter too.
    var url = API + "runs/" + encodeURIComponent(runId) + "/events/" +
      (turn.lastSeq ? "?last_event_id=" + turn.lastSeq : "");
    var source = new EventSource(url, { withCredentials: true });
    state.streams[runId] = source;
    EVENT_TYPES.forEach(function (type) {
      source.addEventListener(type, function (event) {
        var payload = {};
        try { payload = JSON.parse(event.data || "{}"); } catch (e) { payload = {}; }
        turn.handle(type, payload, parseInt(event.lastEventId, 10) || 0);
        if (type === "DONE") {
          source.close();
          delete state.streams[runId];
          refreshConversations();
        }
      });
    });
    source.addEventListener("error", function () {
      // CONNECTING: the browser reconnects by itself and sends Last-Event-ID. CLOSED: the server
      // refused the stream; show what the run says and try the stream again a little later.
      if (source.readyState === EventSource.CLOSED) {
        delete state.streams[runId];
        api("GET", "runs/" + encodeURIComponent(runId) + "/").then(function (run) {
          if (run.status === "COMPLETED" || run.status === "FAILED") {
            if (run.answer && !turn.draft.classList.contains("final")) {
              turn.handle("FINAL_TEXT", { text: run.answer }, 0);
            }
            turn.handle("DONE", { status: run.status }, 0);
          } else {
            setTimeout(function () { if (state.turns[runId] === turn) { follow(runId, turn); } }, 3000);
          }
        }).catch(function (error) { turn.setStatus(errorText(error), "failed"); });
      }
    });
  }

  function ensureFollowing(turn) {
    if (turn.runId && !state.streams[turn.runId]) { follow(turn.runId, turn); }
  }

  // -- sending -------------------------------------------------------------------------------

  function setSending(on) {
    state.sending = on;
    els.send.disabled = on;
    els.input.readOnly = on;
  }

  /* The conversation to send into: the open one, or a new one created first, so the page can
     find the run the chat request starts while that request is still running. */
  function ensureConversation(text) {
    if (state.conversationId) { return Promise.resolve(state.conversationId); }
    return api("POST", "conversations/", { title: text.trim().slice(0, 60) }).then(function (c) {
      setConversation(c.id);
      state.latestRunId = null;
      els.title.textContent = c.title || "Untitled / 未命名";
      refreshConversations();
      return c.id;
    });
  }

  function send(text) {
    if (state.sending || !text.trim()) { return; }
    setSending(true);
    addUserMessage(text);
    var turn = new Turn(null);
    els.input.value = "";
    ensureConversation(text).then(function (conversationId) {
      var known = state.latestRunId;
      var discovering = true;
      // POST chat/ answers once the run has finished or waits for a person. Meanwhile look for
      // the run it started (the conversation's newest run) and stream its events live.
      (function discover() {
        if (!discovering) { return; }
        api("GET", "conversations/" + encodeURIComponent(conversationId) + "/").then(function (c) {
          var run = c.latest_run;
          if (!discovering) { return; }
          if (run && run.id !== known && !turn.runId) { follow(run.id, turn); }
          else if (!turn.runId) { setTimeout(discover, 400); }
        }).catch(function () { if (discovering) { setTimeout(discover, 1000); } });
      })();
      return api("POST", "chat/", { conversation_id: conversationId, message: text }).then(function (data) {
        discovering = false;
        state.latestRunId = data.run_id;
        listOf(data.pending).forEach(function (p) { if (p.token) { state.tokens[p.confirmation_id] = p.token; } });
        if (turn.runId && turn.runId !== data.run_id) {
          // The newest run was someone else's request (another tab): show ours instead.
          if (state.streams[turn.runId]) { state.streams[turn.runId].close(); delete state.streams[turn.runId]; }
          delete state.turns[turn.runId];
          var ours = new Turn(null);
          turn.row.remove();
          turn = ours;
        }
        follow(data.run_id, turn);
      }, function (error) { discovering = false; throw error; });
    }).catch(function (error) {
      turn.setStatus("", "");
      turn.bubble.appendChild(el("div", "turn-error", errorText(error)));
      turn.row.classList.add("failed");
    }).then(function () {
      setSending(false);
      els.input.focus();
    });
  }

  els.form.addEventListener("submit", function (event) {
    event.preventDefault();
    send(els.input.value);
  });
  els.input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send(els.input.value);
    }
  });
  els.newButton.addEventListener("click", function () {
    clearMessages();
    setConversation(null);
    els.title.textContent = "New conversation / 新对话";
    els.input.focus();
  });
  document.querySelectorAll("[data-suggest]").forEach(function (chip) {
    chip.addEventListener("click", function () {
      els.input.value = chip.getAttribute("data-suggest");
      els.input.focus();
    });
  });

  refreshConversations();
  if (state.conversationId) { openConversation(state.conversationId); }
})();
