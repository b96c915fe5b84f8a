/* The chat's list of conversations: each with its title (two lines), its status in words and the
 * time of its last change, searched by the box above it (GET conversations/?q=, after a pause in
 * typing). Exposes AP.Sidebar(options) with refresh() and setActive(id); options:
 *   {list, search, api, currentId() -> id, onOpen(id), onCurrent(conversation)}.
 * Needs api.js and card.js (AP.timeText) first.
 */
(function () {
  "use strict";

  var el = window.AP.el, listOf = window.AP.listOf, errorText = window.AP.errorText, timeText = window.AP.timeText;

  function Sidebar(options) {
    var self = this;
    this.options = options;
    this.query = "";
    var timer = null;
    if (options.search) {
      options.search.addEventListener("input", function () {
        clearTimeout(timer);
        timer = setTimeout(function () {
          self.query = options.search.value.trim().slice(0, 100);
          self.refresh();
        }, 250);
      });
    }
  }

  Sidebar.prototype.render = function (items) {
    var list = this.options.list, current = this.options.currentId(), onOpen = this.options.onOpen;
    list.textContent = "";
    if (!items.length) {
      list.appendChild(el("li", "muted small", this.query ? "Nothing found. / 未找到。" : "No conversations yet. / 暂无对话"));
      return;
    }
    items.forEach(function (c) {
      var li = el("li");
      var button = el("button", "conversation" + (c.id === current ? " active" : ""));
      button.type = "button";
      button.setAttribute("data-conversation-id", c.id);
      button.setAttribute("data-status", c.status || "");
      button.title = c.title || "";
      button.appendChild(el("span", "conversation-title", c.title || "Untitled / 未命名"));
      var meta = el("span", "conversation-meta");
      var status = el("span", "conversation-status status-" + (c.status || "new"), c.status_text || "");
      status.setAttribute("data-testid", "conversation-status");
      meta.appendChild(status);
      meta.appendChild(el("time", "conversation-time", timeText(c.last_activity || c.updated_at || c.created_at)));
      button.appendChild(meta);
      button.addEventListener("click", function () { onOpen(c.id); });
      li.appendChild(button);
      list.appendChild(li);
    });
  };

  /* Read the list again (with the search words) and draw it. Returns a Promise. */
  Sidebar.prototype.refresh = function () {
    var self = this, options = this.options;
    var query = this.query ? "?q=" + encodeURIComponent(this.query) : "";
    return options.api("GET", "conversations/" + query).then(function (data) {
      var items = listOf(data);
      self.render(items);
      var current = items.filter(function (c) { return c.id === options.currentId(); })[0];
      if (current) { options.onCurrent(current); }
    }).catch(function (error) {
      options.list.textContent = "";
      options.list.appendChild(el("li", "muted small", errorText(error)));
    });
  };

  Sidebar.prototype.setActive = function (id) {
    this.options.list.querySelectorAll(".conversation").forEach(function (b) {
      b.classList.toggle("active", b.getAttribute("data-conversation-id") === id);
    });
  };

  window.AP.Sidebar = Sidebar;
})();
