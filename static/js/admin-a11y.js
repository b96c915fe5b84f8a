/* Django admin, accessibility. The admin's SelectFilter2.js (filter_horizontal:
 * groups, user permissions) puts aria-label on a plain <span> search icon, which ARIA does not
 * allow (axe-core aria-prohibited-attr): give those icons the role of an image, whose name the
 * label is. They are created on window load, so this runs just after. */
(function () {
  "use strict";
  function fix() {
    // A list filter's choice for an empty value (a row with a blank field) is a link with no text:
    // give it a visible name (axe-core link-name).
    document.querySelectorAll("#changelist-filter a").forEach(function (link) {
      if (!link.textContent.trim()) { link.textContent = "(empty)"; }
    });
    document.querySelectorAll("span.search-label-icon[aria-label]:not([role])").forEach(function (icon) {
      icon.setAttribute("role", "img");
    });
  }
  window.addEventListener("load", function () { setTimeout(fix, 0); });
})();
