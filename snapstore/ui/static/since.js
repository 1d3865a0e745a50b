// snapstore ui: the timeline's range picker and its detail pane (master-detail review).
// Separate from ui.js on purpose: it only adds to the timeline and never replaces a behaviour.
"use strict";

(function () {
  const box = document.getElementById("timeline");

  // "Tree = #74": scroll to that row when it is on this page, else open the page that holds it.
  document.addEventListener("click", function (e) {
    const a = e.target.closest ? e.target.closest("a.to-row") : null;
    if (!a) return;
    const row = document.getElementById(a.getAttribute("href").slice(1));
    e.preventDefault();
    if (!row) { window.location.href = a.dataset.page; return; }
    row.scrollIntoView({ block: "center" });
    row.classList.add("flash");
    setTimeout(function () { row.classList.remove("flash"); }, 1500);
  });

  if (!box) return;
  // A turn's steps fold under its prompt ("6 steps").
  box.addEventListener("click", function (e) {
    const b = e.target.closest ? e.target.closest("button.steps[data-fold]") : null;
    if (!b) return;
    const open = b.getAttribute("aria-expanded") === "true";
    box.querySelectorAll('tr[data-turn="' + CSS.escape(b.dataset.fold) + '"]').forEach(function (r) { r.hidden = open; });
    b.setAttribute("aria-expanded", open ? "false" : "true");
  });

  // The detail pane: a row's diff (or, with two rows ticked, their comparison) beside the list.
  const pane = document.createElement("aside");
  pane.id = "detail";
  pane.setAttribute("aria-live", "polite");
  pane.setAttribute("aria-label", "The selected checkpoint");
  pane.hidden = true;
  box.parentNode.insertBefore(pane, box.nextSibling);
  let asked = 0;

  async function show(src, title) {
    const mine = ++asked;
    pane.hidden = false;
    document.body.classList.add("detail-open");
    pane.innerHTML = "";
    const head = document.createElement("h2");
    head.className = "detail-head";
    const open = document.createElement("a");
    open.href = src;
    open.textContent = title;
    head.append(open);
    pane.append(head);
    try {
      const r = await fetch(src, { credentials: "same-origin" });
      if (!r.ok || mine !== asked) return;
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      const main = doc.querySelector("main");
      if (!main) return;
      // The summary and the diffs (the record and its forms stay on the page itself).
      main.querySelectorAll("p.summary, details.filediff, p.toggle ~ p.note").forEach(function (el) {
        pane.append(document.adoptNode(el));
      });
      pane.querySelectorAll("details.filediff").forEach(function (d, i) { d.open = i < 6; });
    } catch (err) {
      // the server stopped: the link still opens the page
    }
  }

  function ticked() {
    return Array.from(document.querySelectorAll('#timeline input[name="pick"]:checked'));
  }

  // Beside the list only where there is room for both (narrow screens open a row's page).
  function wide() { return window.matchMedia("(min-width: 1100px)").matches; }

  function pick(row) {
    box.querySelectorAll("tr.cp.picked").forEach(function (r) { r.classList.remove("picked"); });
    row.classList.add("picked");
    show(row.getAttribute("data-href"), "Open #" + row.id.slice(1) + " on its own page");
  }

  box.addEventListener("click", function (e) {
    const t = e.target;
    if (t.closest("a, button, input, label, select") || !wide()) return;
    const row = t.closest("tr.cp[data-href]");
    if (row) pick(row);
  });

  // j/k (ui.js moves the selection first): the pane follows, once the keys rest.
  let timer = 0;
  document.addEventListener("keydown", function (e) {
    if ((e.key !== "j" && e.key !== "k") || !wide()) return;
    clearTimeout(timer);
    timer = setTimeout(function () {
      const row = box.querySelector("tr.cp.selected[data-href]");
      if (row && !row.classList.contains("picked")) pick(row);
    }, 250);
  });

  box.addEventListener("change", function (e) {
    if (!e.target.matches('input[name="pick"]')) return;
    const two = ticked();
    const button = document.getElementById("range-picked");
    if (button) button.disabled = two.length !== 2;
    if (two.length !== 2 || !wide()) return;
    const ids = two.map(function (i) { return i.value; });
    // older first: rows are listed newest first
    const src = "/compare?a=" + encodeURIComponent(ids[1].slice(0, 12)) + "&b=" + encodeURIComponent(ids[0].slice(0, 12));
    show(src, "Open the comparison on its own page");
  });
})();
