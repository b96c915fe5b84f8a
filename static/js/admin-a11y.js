/* Django admin, accessibility (issue 13 item 11). The admin's SelectFilter2.js (filter_horizontal:
 * groups, user permissions) puts aria-label on a plain <span> search icon, which ARIA does not
 * allow (axe-core aria-prohibited-attr): give those icons the role of an image, whose name the
 * label is. They are created on window load, so this runs just after. */
(function () {
  "use strict";
  function fix() {
    document.querySelectorAll("span.search-label-icon[aria-label]:not([role])").forEach(function (icon) {
      icon.setAttribute("role", "img");
    });
  }
  window.addEventListener("load", function () { setTimeout(fix, 0); });
})();
