/* The chat page (/chat/). Plain browser JavaScript, no build step, no third-party code.
 *
 * Talks to the REST API with the session cookie and the CSRF token:
 *   GET  conversations/?q=         the list in the sidebar (each with its status), searched
 *   POST conversations/            a new conversation, created before its first message is sent
 *   GET  conversations/{id}/       the messages, the latest run and the decision cards of one
 *                                  conversation (every gated call rebuilt from stored state)
 *   POST chat/ (Prefer: respond-async) {conversation_id, message} -> 202 {conversation_id, run_id, events_url}
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
 * Needs api.js (window.AP helpers), card.js (AP.Card), turn.js (AP.Turn) and sidebar.js
 * (AP.Sidebar: the list of conversations) first.
 */
(function () {
  "use strict";

  var root = document.getElementById("chat-app");
  if (!root || !window.AP || !window.AP.Turn || !window.AP.Card || !window.AP.Sidebar) { return; }
  var API = root.getAttribute("data-api") || "/api/v1/";
  var els = {
    list: document.getElementById("conversation-list"),
    messages: document.getElementById("messages"),
    empty: document.getElementById("empty-state"),
    title: document.getElementById("conversation-title"),
    form: document.getElementById("composer"),
    input: document.getElementById("message-input"),
    send: document.getElementById("send-button"),
    newButton: document.getElementById("new-conversation"),
    search: document.getElementById("conversation-search")
  };
  var state = {
    conversationId: root.getAttribute("data-conversation-id") || null,
    tokens: {},       // confirmation_id -> raw token (only the requester's own, only in memory)
    streams: {},      // run_id -> EventSource
    turns: {},        // run_id -> Turn
    latestRunId: null, // newest run of the open conversation (to spot the next one)
    sending: false
  };

  var el = window.AP.el, errorText = window.AP.errorText;
  var api = window.AP.client(API);

  function scrollDown() { els.messages.scrollTop = els.messages.scrollHeight; }

  var sidebar = new window.AP.Sidebar({
    list: els.list, search: els.search, api: api,
    currentId: function () { return state.conversationId; },
    onOpen: function (id) { openConversation(id); },
    onCurrent: function (c) { els.title.textContent = c.title || "Untitled / 未命名"; }
  });

  function refreshConversations() { return sidebar.refresh(); }

  function setConversation(id) {
    state.conversationId = id;
    var url = new URL(window.location.href);
    if (id) { url.searchParams.set("c", id); } else { url.searchParams.delete("c"); }
    window.history.replaceState(null, "", url.toString());
    sidebar.setActive(id);
  }

  function closeStreams() {
    Object.keys(state.streams).forEach(function (runId) { state.streams[runId].close(); });
    Object.keys(state.turns).forEach(function (runId) { state.turns[runId].dispose(); });
    state.streams = {};
    state.turns = {};
  }

  /* What a Turn may use of this page. */
  var host = {
    container: els.messages,
    api: api,
    tokens: state.tokens,
    register: function (runId, turn) { state.turns[runId] = turn; },
    follow: function (turn) { ensureFollowing(turn); },
    scrollDown: function () { scrollDown(); }
  };

  function newTurn(runId) {
    els.empty.hidden = true;
    return new window.AP.Turn(host, runId);
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
      // The latest run may still wait for a decision, or still be running (a worker resumes it):
      // its events are replayed from the start so its steps and cards show again, live. Every
      // other run's cards are rebuilt from the stored requests, after the message that started it.
      var run = data.latest_run;
      var live = run && (run.status === "AWAITING_CONFIRMATION" || run.status === "RUNNING") ? run.id : null;
      var byRun = {}, drawn = {};
      (data.cards || []).forEach(function (c) {
        if (c.run_id === live) { return; }
        (byRun[c.run_id] = byRun[c.run_id] || []).push(c);
      });
      (data.messages || []).forEach(function (m) {
        if (m.role === "user") {
          addUserMessage(m.content);
          if (m.run_id && byRun[m.run_id] && !drawn[m.run_id]) { drawn[m.run_id] = true; addHistoryCards(m.run_id, byRun[m.run_id]); }
        }
        else if (m.role === "assistant" && m.content) { addAssistantMessage(m.content); }
      });
      Object.keys(byRun).forEach(function (runId) { if (!drawn[runId]) { addHistoryCards(runId, byRun[runId]); } });
      state.latestRunId = run ? run.id : null;
      if (live) { follow(live, newTurn(live)); }
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

  /* The decision cards of an earlier run, drawn from the server's cards (agentplatform.runtime.cards). */
  function addHistoryCards(runId, cards) {
    els.empty.hidden = true;
    var turn = new window.AP.Turn(host, runId === "null" ? null : runId, { history: true });
    cards.forEach(function (c) {
      var card = turn.card({ confirmation_id: c.confirmation_id, tool_call_id: c.tool_call_id || c.confirmation_id,
        tool: c.tool, tool_label: c.tool_label, summary: c.summary, risk: c.risk, needs: c.needs,
        quorum: c.quorum, expires_at: c.expires_at, facts: c.facts, written_by_assistant: c.written_by_assistant,
        rebuilt: true });
      card.apply(c);
    });
  }

  function addAssistantMessage(text) {
    els.empty.hidden = true;
    var row = el("div", "msg msg-assistant");
    row.appendChild(el("div", "bubble answer", text));
    els.messages.appendChild(row);
  }

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
          if (run.status === "COMPLETED" || run.status === "FAILED" || run.status === "CANCELLED") {
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

  /* A conversation's title from its first message: up to 120 characters, cut at a word. */
  function titleOf(text) {
    var clean = text.trim().replace(/\s+/g, " ");
    if (clean.length <= 120) { return clean; }
    var cut = clean.slice(0, 120), space = cut.lastIndexOf(" ");
    return (space > 60 ? cut.slice(0, space) : cut) + "…";
  }

  /* The conversation to send into: the open one, or a new one created first, so the page can
     find the run the chat request starts while that request is still running. */
  function ensureConversation(text) {
    if (state.conversationId) { return Promise.resolve(state.conversationId); }
    return api("POST", "conversations/", { title: titleOf(text) }).then(function (c) {
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
    var turn = newTurn(null);
    els.input.value = "";
    ensureConversation(text).then(function (conversationId) {
      // Prefer: respond-async: the API answers 202 with the run at once (the run goes on in a
      // worker); its events stream follows. Tokens of my own pending calls are fetched when needed
      // (POST confirmations/{id}/token/).
      return api("POST", "chat/", { conversation_id: conversationId, message: text },
                 { "Prefer": "respond-async" }).then(function (data) {
        if (state.conversationId !== conversationId) { return; }  // the person opened another one
        state.latestRunId = data.run_id;
        follow(data.run_id, turn);
      });
    }).catch(function (error) {
      turn.setStatus("", "");
      if (!turn.bubble.querySelector(".turn-error")) {  // the run's own ERROR event may have said it
        var refusal = el("div", "turn-error", errorText(error));
        refusal.setAttribute("data-code", error.code || "");
        turn.bubble.appendChild(refusal);
      }
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
  // The page renders Send disabled: a click before this script ran would submit the form natively
  // and lose the message. From here on the script sends it.
  els.send.disabled = false;
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
