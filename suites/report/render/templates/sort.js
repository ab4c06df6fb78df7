// The page's one script. Views open lazily: a view's content waits in a <template> (not rendered,
// not in the document's tables) and is put in place the first time the view opens, so the page
// with its views closed is its first screen only. Clicking a column header sorts its table by
// that column (numbers numerically); clicking again reverses it. Both work by delegation, so
// tables put in place later sort too.
function openView(details) {
  var template = details.querySelector(":scope > template");
  if (template) {
    details.appendChild(template.content.cloneNode(true));
    template.remove();
  }
}
document.addEventListener("toggle", function (event) {
  if (event.target.tagName === "DETAILS" && event.target.open) openView(event.target);
}, true);
// A view named in the URL (#problem-3) opens, with the views that hold it.
function openFromHash() {
  if (!location.hash) return;
  var id = decodeURIComponent(location.hash.slice(1));
  var found = document.getElementById(id);
  if (!found) {  // inside a view not yet opened: open the views that may hold it
    document.querySelectorAll("details > template").forEach(function (template) {
      if (template.content.getElementById && template.content.getElementById(id)) {
        template.parentElement.open = true;
        openView(template.parentElement);
      }
    });
    found = document.getElementById(id);
  }
  if (found && found.tagName === "DETAILS") { found.open = true; openView(found); found.scrollIntoView(); }
}
window.addEventListener("hashchange", openFromHash);
openFromHash();
document.addEventListener("click", function (event) {
  var th = event.target.closest ? event.target.closest("table.sortable thead th") : null;
  if (!th) return;
  var table = th.closest("table");
  var headers = Array.prototype.slice.call(table.querySelectorAll("thead th"));
  var column = headers.indexOf(th);
  var ascending = th.getAttribute("aria-sort") !== "ascending";
  headers.forEach(function (other) { other.removeAttribute("aria-sort"); });
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  var numeric = th.dataset.numeric === "1";
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var x = a.cells[column].dataset.sort, y = b.cells[column].dataset.sort;
    if (x === "" && y === "") return 0;
    if (x === "") return 1;   // missing values last, either direction
    if (y === "") return -1;
    var order = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
    return ascending ? order : -order;
  });
  rows.forEach(function (row) { body.appendChild(row); });
});
