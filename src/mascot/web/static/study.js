// Study pages: one submission per click (a double click must not post twice).
(function () {
  "use strict";
  var form = document.getElementById("rating-form");
  if (!form) return;
  form.addEventListener("submit", function () {
    var button = document.getElementById("submit-rating");
    if (button) {
      button.disabled = true;
      button.textContent = "Saving…";
    }
  });
})();
