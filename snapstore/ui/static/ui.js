// snapstore ui: locale formatting, keyboard navigation and live updates. No dependencies.
"use strict";

(function () {
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
  const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const SPANS = [[60, "second"], [3600, "minute"], [86400, "hour"], [604800, "day"], [2629800, "week"], [31557600, "month"], [Infinity, "year"]];

  // "5 minutes ago": the unit that keeps the number small (the full date is the title).
  function ago(d) {
    const s = (d.getTime() - Date.now()) / 1000;
    let unit = 1;
    for (const [limit, name] of SPANS) {
      if (Math.abs(s) < limit) return relative.format(Math.round(s / unit), name);
      unit = limit;
    }
    return dateTime.format(d);
  }

  // Times and sizes arrive in the server's format; show them in the reader's locale.
  function localise(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      const d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      el.title = dateTime.format(d);
      el.textContent = el.classList.contains("rel") ? ago(d) : dateTime.format(d);
    });
    root.querySelectorAll("data.size[value]").forEach(function (el) {
      let n = Number(el.getAttribute("value")), u = 0;
      while (Math.abs(n) >= 1024 && u < UNITS.length - 1) { n /= 1024; u++; }
      el.textContent = (u ? number.format(n) : String(n)) + " " + UNITS[u];
    });
  }

  // j/k move through the rows of the page (checkpoints, files), Enter opens the selected one.
  let selected = null;
  function rows() { return Array.from(document.querySelectorAll("main .cp[data-href]")); }
  function select(row) {
    if (selected) { selected.classList.remove("selected"); selected.removeAttribute("aria-selected"); }
    selected = row;
    if (row) {
      row.classList.add("selected");
      row.setAttribute("aria-selected", "true");
      // focus follows the selection, so a screen reader reads the row and Enter reaches it
      if (!row.hasAttribute("tabindex")) row.tabIndex = -1;
      const a = document.activeElement;  // (never taken from a field being typed in)
      if (!a || a === document.body || a.id === "main" || a.classList.contains("cp") || !document.contains(a)) row.focus({ preventScroll: true });
      row.scrollIntoView({ block: "nearest" });
    }
  }
  // Enter opens the selected row unless it is meant for what has the focus (a link, a button, a field)
  function ownsEnter(t) {
    return !!(t && t.closest && t.closest("a[href], button, input, select, textarea, summary, dialog, [contenteditable]"));
  }
  function move(step) {
    const all = rows();
    if (!all.length) return;
    const i = all.indexOf(selected);
    select(all[i < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, i + step))]);
  }
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
    if (e.key === "j") { move(1); e.preventDefault(); }
    else if (e.key === "k") { move(-1); e.preventDefault(); }
    else if (e.key === "?") { help(); e.preventDefault(); }
    else if (e.key === "Enter" && selected && !ownsEnter(t)) {
      window.location.href = selected.getAttribute("data-href"); e.preventDefault();
    }
    else if (e.key === "[" || e.key === "]") {
      // older / newer checkpoint (on a checkpoint page), older / newer page (on the timeline)
      const link = document.getElementById(e.key === "[" ? "older" : "newer");
      if (link) { link.click(); e.preventDefault(); }
    }
    else if (e.key === "/") { const q = document.getElementById("filter-q"); if (q) { q.focus(); e.preventDefault(); } }
    else if (e.key === "u" || e.key === "s") {
      const link = document.getElementById(e.key === "u" ? "view-unified" : "view-split");
      if (link) { link.click(); e.preventDefault(); }
    }
  });

  // "?": every key, in a dialog (Escape or the button closes it).
  const KEYS = [
    ["j / k", "select the next / previous row"], ["Enter", "open the selected row"],
    ["[ / ]", "older / newer checkpoint (the timeline: older page / newest)"], ["/", "go to the message filter"],
    ["u / s", "unified / side-by-side diffs"], ["?", "this help"],
  ];
  function help() {
    let box = document.getElementById("keys-help");
    if (!box) {
      box = document.createElement("dialog");
      box.id = "keys-help";
      box.setAttribute("aria-labelledby", "keys-help-title");
      const title = document.createElement("h2");
      title.id = "keys-help-title";
      title.textContent = "Keys";
      const list = document.createElement("dl");
      KEYS.forEach(function (k) {
        const dt = document.createElement("dt"), dd = document.createElement("dd"), kbd = document.createElement("kbd");
        kbd.textContent = k[0]; dt.append(kbd); dd.textContent = k[1];
        list.append(dt, dd);
      });
      const close = document.createElement("button");
      close.type = "button"; close.textContent = "Close";
      close.addEventListener("click", function () { box.close(); });
      box.append(title, list, close);
      document.body.append(box);
    }
    if (box.open) box.close(); else box.showModal();
  }

  // Diffs past the page's first part: each placeholder loads its fragment as it nears the
  // screen, two at a time, in page order.
  const waiting = [];
  let loading = 0;
  function pump() {
    while (loading < 2 && waiting.length) {
      const box = waiting.shift();
      loading++;
      fetch(box.dataset.src, { credentials: "same-origin" }).then(function (r) {
        return r.text().then(function (text) {
          box.innerHTML = text;  // server-rendered, escaped HTML from this origin
          box.classList.remove("lazy");
          box.classList.add("loaded");
          localise(box);
        });
      }).catch(function () {
        // the server stopped: keep the placeholder and its link
      }).finally(function () { loading--; pump(); });
    }
  }
  function lazy() {
    const boxes = Array.from(document.querySelectorAll("div.lazy[data-src]"));
    if (!boxes.length) return;
    if (!("IntersectionObserver" in window)) { boxes.forEach(function (b) { waiting.push(b); }); pump(); return; }
    const seen = new IntersectionObserver(function (entries) {
      entries.forEach(function (en) {
        if (!en.isIntersecting) return;
        seen.unobserve(en.target);
        waiting.push(en.target);
      });
      waiting.sort(function (a, b) { return a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1; });
      pump();
    }, { rootMargin: "1200px 0px" });
    boxes.forEach(function (b) { seen.observe(b); });
  }

  // A preview's per-path diffs: loaded when a path is opened, not with the page.
  document.addEventListener("toggle", function (e) {
    const d = e.target;
    if (!d.open || !d.dataset || !d.dataset.src || d.dataset.loaded) return;
    d.dataset.loaded = "1";
    const body = d.querySelector(".lazybody");
    fetch(d.dataset.src, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (text) {
      if (body) { body.innerHTML = text; localise(body); }  // server-rendered, escaped HTML from this origin
    }).catch(function () { delete d.dataset.loaded; });
  }, true);

  // "Show more context": the file's diff again, wider, in place (the link itself is the page of
  // that one diff, for a new tab or without script).
  document.addEventListener("click", function (e) {
    const a = e.target.closest ? e.target.closest("a.expand") : null;
    const box = a ? a.closest("details.filediff") : null;
    if (!box || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) return;
    e.preventDefault();
    const src = a.getAttribute("href") + "&frag=1";
    fetch(src, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (text) {
      Array.from(box.children).forEach(function (c) { if (c.tagName !== "SUMMARY") c.remove(); });
      const body = document.createElement("div");
      body.className = "loaded";
      body.innerHTML = text;  // server-rendered, escaped HTML from this origin
      box.append(body);
      localise(body);
    }).catch(function () { window.location.href = a.getAttribute("href"); });
  });

  // "fold all" / "unfold all": every file's diff on the page.
  document.addEventListener("click", function (e) {
    const b = e.target.closest ? e.target.closest("#fold-all") : null;
    if (!b) return;
    const all = Array.from(document.querySelectorAll("details.filediff"));
    const open = all.some(function (d) { return d.open; });
    all.forEach(function (d) { d.open = !open; });
    b.textContent = open ? "unfold all" : "fold all";
  });

  // A confirmation is sent once: the button is disabled as the form goes.
  document.addEventListener("submit", function (e) {
    const b = e.target.querySelector("button[type=submit]");
    if (b) setTimeout(function () { b.disabled = true; }, 0);
  });

  // Live: the timeline asks for the store's revision every 2 s (only while visible) and
  // reloads its list when it changed.
  function live() {
    const box = document.getElementById("timeline");
    if (!box || !box.dataset.src) return;
    let revision = document.body.dataset.revision;
    let busy = false;
    async function poll() {
      if (busy || document.visibilityState !== "visible") return;
      busy = true;
      try {
        const r = await fetch("/api/revision", { credentials: "same-origin", cache: "no-store" });
        if (!r.ok) return;
        const now = (await r.json()).revision;
        if (now === revision) return;
        const page = await fetch(box.dataset.src, { credentials: "same-origin", cache: "no-store" });
        if (!page.ok) return;
        const keep = selected ? selected.getAttribute("data-href") : null;
        box.innerHTML = await page.text();  // server-rendered, escaped HTML from this origin
        localise(box);
        revision = now;
        document.body.dataset.revision = now;
        if (keep) select(box.querySelector('.cp[data-href="' + CSS.escape(keep) + '"]'));
        here();
        prompts();
      } catch (err) {
        // the server stopped: keep the page as it is
      } finally {
        busy = false;
      }
    }
    setInterval(poll, 2000);
  }

  // The working tree's row: loaded after the page (it walks the tree); it names the
  // checkpoint the tree equals, which gets a "you are here" mark.
  async function here() {
    const note = document.querySelector("p.here-note[data-cid]");
    if (note) return hereNote(note);
    const box = document.getElementById("worktree");
    if (!box || !box.dataset.src) return;
    try {
      const r = await fetch(box.dataset.src, { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) return;
      box.innerHTML = await r.text();  // server-rendered, escaped HTML from this origin
      const row = box.querySelector("tr[data-here]");
      const id = row ? row.getAttribute("data-here") : "";
      if (!id) return;
      const at = document.querySelector('#timeline tr.cp[data-href="/c/' + CSS.escape(id) + '"]');
      if (!at) return;
      at.classList.add("here");
      const cell = at.querySelector("td.msg");
      if (cell && !cell.querySelector(".here-badge")) {
        const badge = document.createElement("span");
        badge.className = "here-badge";
        badge.textContent = "you are here";
        cell.prepend(badge, " ");
      }
    } catch (err) {
      // the server stopped: keep the placeholder
    }
  }

  // On a checkpoint's page: say so when the working tree equals it.
  async function hereNote(note) {
    try {
      const r = await fetch("/here.frag", { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) return;
      const box = document.createElement("tbody");  // the row is a <tr>: parse it where one fits
      box.innerHTML = await r.text();
      const row = box.querySelector("tr[data-here]");
      if (row && row.getAttribute("data-here") === note.dataset.cid) note.hidden = false;
    } catch (err) {
      // the server stopped: no note
    }
  }

  // Each row's prompt (the last thing a person typed before it): read after the page painted.
  async function prompts() {
    const box = document.getElementById("timeline");
    if (!box || !box.dataset.src) return;
    try {
      const r = await fetch(box.dataset.src.replace("/timeline.frag", "/timeline.prompts"), { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) return;
      const found = await r.json();
      box.querySelectorAll("tr.cp[data-href]").forEach(function (row) {
        const text = found[row.getAttribute("data-href").slice(3)];
        const cell = row.querySelector("td.msg");
        if (!text || !cell || cell.querySelector(".prompt")) return;
        const p = document.createElement("div");
        p.className = "prompt";
        p.textContent = text;  // text, never markup
        cell.append(p);
      });
    } catch (err) {
      // the server stopped: rows without prompts
    }
  }

  localise(document);
  lazy();
  live();
  here();
  prompts();
})();
