/* Shared helpers of the people's pages: JSON calls to the REST API with the session cookie and
 * CSRF token, the error body {"code", "message", "retryable"} as a JS Error, and safe DOM building
 * (text only ever goes through textContent). Exposes window.AP. No dependencies, no build step.
 */
(function () {
  "use strict";

  var ERROR_TEXT = {
    CONFIRMATION_EXPIRED: "This confirmation expired; nothing was done. / 确认已过期，未执行。",
    ALREADY_DECIDED: "This call was already decided. / 该操作已处理。",
    CONFIRMATION_INVALID: "This confirmation is no longer valid. / 该确认已失效。",
    PERMISSION_DENIED: "You are not allowed to do this. / 您无权执行此操作。",
    NOT_AUTHENTICATED: "Your session ended; please sign in again. / 会话已结束，请重新登录。"
  };

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  /* A new element with a class and text (never HTML). */
  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = text; }
    return node;
  }

  /* A client for the API under `base` (e.g. "/api/v1/"): api(method, path, body?, headers?) ->
   * Promise of the JSON answer; a non-2xx answer rejects with an Error carrying code, status and
   * retryable. */
  function client(base) {
    return function api(method, path, body, extraHeaders) {
      var headers = { "Accept": "application/json", "X-CSRFToken": csrfToken() };
      Object.keys(extraHeaders || {}).forEach(function (name) { headers[name] = extraHeaders[name]; });
      if (body !== undefined) { headers["Content-Type"] = "application/json"; }
      return fetch(base + path, {
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
    };
  }

  /* The items of a list answer, paginated ({results: [...]}) or not. */
  function listOf(data) {
    if (Array.isArray(data)) { return data; }
    return (data && (data.results || data.items)) || [];
  }

  /* What a person reads for an API error: words, never the code (it stays on error.code). */
  function errorText(error) {
    // A refusal names what is missing (e.g. "missing the permission catalog.cancel_order"): show it.
    if (error.code === "PERMISSION_DENIED" && error.message && error.message !== "Forbidden") {
      return "You are not allowed to do this / 您无权执行此操作: " + error.message;
    }
    return ERROR_TEXT[error.code] || (error.message || "Something went wrong. / 出错了。");
  }

  window.AP = { client: client, el: el, listOf: listOf, errorText: errorText };
})();
