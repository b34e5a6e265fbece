// ctxd ui: the few things the server-rendered pages do in the browser.
// Folded messages are fetched from this same server when a fold opens, and a
// conversation opens scrolled to its latest message. No other requests.
"use strict";

async function load(src, into, replace) {
  try {
    const r = await fetch(src, { headers: { Accept: "text/html" } });
    const html = await r.text();
    const box = document.createElement("div");
    box.innerHTML = r.ok ? html : "";
    if (!r.ok) {
      const p = document.createElement("p");
      p.className = "err";
      p.textContent = "Could not load the folded messages (" + r.status + ").";
      box.appendChild(p);
    }
    if (replace) { replace.replaceWith(...box.childNodes); } else { into.replaceChildren(...box.childNodes); }
  } catch (e) {
    into.textContent = "Could not reach the page server.";
  }
}

document.addEventListener("toggle", (ev) => {
  const fold = ev.target;
  if (!(fold instanceof HTMLDetailsElement) || !fold.open || !fold.dataset.src) return;
  if (fold.dataset.loaded) return;
  fold.dataset.loaded = "1";
  load(fold.dataset.src, fold.querySelector(".folded"));
}, true);

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button.more");
  if (b && b.dataset.src) { b.disabled = true; load(b.dataset.src, b.parentElement, b); }
});

document.addEventListener("DOMContentLoaded", () => {
  const t = document.getElementById("transcript");
  if (t && t.dataset.latest === "true" && !location.hash) {
    const last = t.querySelector("article.msg:last-of-type");
    if (last) last.scrollIntoView({ block: "end" });
  }
});
