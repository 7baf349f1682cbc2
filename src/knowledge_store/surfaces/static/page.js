// knowledge-store search page: a few conveniences; the page works without them.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    var box = document.getElementById("q");
    var typing = /^(INPUT|TEXTAREA|SELECT)$/.test((event.target || {}).tagName || "");
    if (event.key === "/" && box && !typing) {
      event.preventDefault();
      box.focus();
      box.select();
    }
  });
  document.querySelectorAll("select.autosubmit").forEach(function (select) {
    select.addEventListener("change", function () {
      if (select.form) select.form.submit();
    });
  });
  document.querySelectorAll(".uid").forEach(function (node) {
    node.title = "click to copy the uid";
    node.addEventListener("click", function () {
      if (navigator.clipboard) navigator.clipboard.writeText(node.textContent || "");
    });
  });
})();
