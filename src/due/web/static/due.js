// Ask before a form that destroys work is sent (the forms carry data-confirm).
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
}, true);
