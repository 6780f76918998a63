// Live refresh without a framework: an element with data-refresh="URL" is fetched again every
// data-every seconds and its content replaced; data-load="URL" is fetched at once, and again every
// data-every seconds where it has one (host 0's log, read over SSH, loads apart from the page so
// it never slows it). A fetch still under way is not started twice. Requests carry the cookie.
"use strict";
async function load(el, url) {
  if (el.dataset.busy) return;
  el.dataset.busy = "1";
  try {
    const response = await fetch(url, {credentials: "same-origin", cache: "no-store"});
    if (response.ok) el.innerHTML = await response.text();
  } catch (e) { /* the server is gone or restarting: keep what is shown */ }
  finally { delete el.dataset.busy; }
}
function every(el, url) {
  if (el.dataset.every) setInterval(() => load(el, url), 1000 * Number(el.dataset.every));
}
document.querySelectorAll("[data-load]").forEach(el => { load(el, el.dataset.load); every(el, el.dataset.load); });
document.querySelectorAll("[data-refresh]").forEach(el => {
  if (!el.dataset.every) el.dataset.every = "5";
  every(el, el.dataset.refresh);
});
