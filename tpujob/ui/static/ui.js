// Live refresh without a framework: an element with data-refresh="URL" is fetched again every
// data-every seconds and its content replaced; data-load="URL" is fetched once (host 0's log,
// read over SSH, would slow the page itself). Requests carry the dashboard's cookie.
"use strict";
async function load(el, url) {
  try {
    const response = await fetch(url, {credentials: "same-origin", cache: "no-store"});
    if (response.ok) el.innerHTML = await response.text();
  } catch (e) { /* the server is gone or restarting: keep what is shown */ }
}
document.querySelectorAll("[data-load]").forEach(el => load(el, el.dataset.load));
document.querySelectorAll("[data-refresh]").forEach(el => {
  setInterval(() => load(el, el.dataset.refresh), 1000 * (Number(el.dataset.every) || 5));
});
