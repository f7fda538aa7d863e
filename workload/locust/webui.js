// agentload in Locust's web UI (served by workload/locust/webui.py, no outside fetch):
// folds each class's step rows in the "Agents" table (collapsed by default; click the
// class row), draws the "Agent charts" tab from /agentload/history, and hides Locust's own
// "Profile" field of the start form (agentload's is "Agent Profile").
// Locust's React UI owns the tables: we only set data-* attributes on its rows (styled by
// the sheet below) and put our charts inside the charts tab's one empty cell.
(function () {
  "use strict";
  const AGENTS_HEAD = "Class / step";
  const CHARTS_HEAD = "Agent metrics per class";
  const POLL_MS = 5000;
  const CHARTS = [
    ["ttft_p95", "TTFT p95 (ms)"],
    ["tpot_p95", "TPOT p95 (ms)"],
    ["goodput", "Goodput (good sessions/min)"],
    ["accept_len", "Spec-decode acceptance length"],
    ["draft_accept", "Draft acceptance rate"],
    ["cached_ratio", "Prefix-cache hit ratio"],
  ];
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const open = new Set(); // classes whose step rows are shown
  let history = null;
  let lastFetch = 0;

  const style = document.createElement("style");
  style.textContent = `
    tr[data-al-hidden] { display: none; }
    tr[data-al-fold] { cursor: pointer; }
    tr[data-al-fold] td:first-child::before { content: "\\25B8  "; }
    tr[data-al-fold="open"] td:first-child::before { content: "\\25BE  "; }
    tr[data-al-step] td:first-child { padding-left: 2.2em; }
    tr[data-al-step] td:first-child, tr[data-al-fold] td:first-child { white-space: nowrap; }
    #agentload-charts { display: flex; flex-wrap: wrap; gap: 12px; padding: 4px 0; }
    #agentload-charts figure { margin: 0; }
    #agentload-charts figcaption { font: 600 13px sans-serif; margin: 0 0 2px 4px; }
    #agentload-charts svg text { font: 11px sans-serif; fill: currentColor; }
    #agentload-charts .al-legend { width: 100%; font: 12px sans-serif; }
    #agentload-charts .al-legend span { margin-right: 14px; }
    #agentload-charts .al-empty { font: 13px sans-serif; opacity: 0.8; }
  `;
  document.head.appendChild(style);

  function tableWithHead(prefix) {
    for (const t of document.querySelectorAll("table")) {
      const th = t.querySelector("thead th");
      if (th && th.textContent.trim().startsWith(prefix)) return t;
    }
    return null;
  }

  function label(tr) {
    const td = tr.querySelector("td");
    return td ? td.textContent.trim() : "";
  }

  function fold() {
    const table = tableWithHead(AGENTS_HEAD);
    if (!table) return;
    const rows = [...table.querySelectorAll("tbody tr")];
    const withSteps = new Set();
    for (const tr of rows) {
      const m = /^(.*) #\d+$/.exec(label(tr));
      if (m) withSteps.add(m[1]);
    }
    for (const tr of rows) {
      const name = label(tr);
      const m = /^(.*) #\d+$/.exec(name);
      if (m) {
        set(tr, "data-al-step", m[1]);
        set(tr, "data-al-hidden", open.has(m[1]) ? null : "");
        set(tr, "data-al-fold", null);
      } else {
        set(tr, "data-al-step", null);
        set(tr, "data-al-hidden", null);
        set(tr, "data-al-fold", withSteps.has(name) ? (open.has(name) ? "open" : "closed") : null);
        set(tr, "title", withSteps.has(name) ? "Click to show or hide this class's steps" : null);
      }
    }
  }

  function set(el, attr, value) {
    if (value === null) {
      if (el.hasAttribute(attr)) el.removeAttribute(attr);
    } else if (el.getAttribute(attr) !== value) {
      el.setAttribute(attr, value);
    }
  }

  document.addEventListener("click", (ev) => {
    const tr = ev.target.closest && ev.target.closest("tr[data-al-fold]");
    if (!tr) return;
    const name = label(tr);
    if (open.has(name)) open.delete(name);
    else open.add(name);
    fold();
  });

  function chartsCell() {
    const table = tableWithHead(CHARTS_HEAD);
    if (!table) return null;
    const td = table.querySelector("tbody td");
    if (!td) return null;
    let box = td.querySelector("#agentload-charts");
    if (!box) {
      box = document.createElement("div");
      box.id = "agentload-charts";
      td.appendChild(box);
      draw(box);
    }
    return box;
  }

  function refreshCharts() {
    const box = chartsCell();
    if (!box || Date.now() - lastFetch < POLL_MS - 100) return;
    lastFetch = Date.now();
    fetch("./agentload/history", { cache: "no-store" })
      .then((r) => r.json())
      .then((h) => {
        history = h;
        const b = chartsCell();
        if (b) draw(b);
      })
      .catch(() => {});
  }

  function svgEl(name, attrs, text) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function fmt(v) {
    if (Math.abs(v) >= 100) return v.toFixed(0);
    if (Math.abs(v) >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  function draw(box) {
    box.replaceChildren();
    const h = history;
    if (!h || !h.points || !h.points.length) {
      const p = document.createElement("div");
      p.className = "al-empty";
      p.textContent = "No samples yet: the charts fill in while a test runs (one point every 5 s).";
      box.appendChild(p);
      return;
    }
    const legend = document.createElement("div");
    legend.className = "al-legend";
    h.classes.forEach((c, i) => {
      const s = document.createElement("span");
      s.style.color = COLORS[i % COLORS.length];
      s.textContent = "\u25A0 " + c;
      legend.appendChild(s);
    });
    box.appendChild(legend);
    const t0 = h.points[0].t - h.points[0].window_s;
    for (const [key, title] of CHARTS) box.appendChild(chart(h, key, title, t0));
  }

  function chart(h, key, title, t0) {
    const W = 430, H = 190, L = 48, R = 10, T = 8, B = 26;
    const fig = document.createElement("figure");
    fig.dataset.metric = key;
    const cap = document.createElement("figcaption");
    cap.textContent = title;
    fig.appendChild(cap);
    const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const xs = h.points.map((p) => p.t - t0);
    const xmax = Math.max(1, xs[xs.length - 1]);
    let ymax = 0;
    for (const p of h.points)
      for (const c of h.classes) {
        const v = (p.by_class[c] || {})[key];
        if (v !== null && v !== undefined) ymax = Math.max(ymax, v);
      }
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    const x = (v) => L + (v / xmax) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    const axis = { stroke: "currentColor", "stroke-opacity": "0.35", fill: "none" };
    svg.appendChild(svgEl("path", { d: `M${L},${T}V${H - B}H${W - R}`, ...axis }));
    for (const f of [0.5, 1]) {
      svg.appendChild(svgEl("path", { d: `M${L},${y(ymax * f / 1.1)}H${W - R}`, ...axis, "stroke-dasharray": "3 3" }));
      svg.appendChild(svgEl("text", { x: L - 4, y: y(ymax * f / 1.1) + 4, "text-anchor": "end" }, fmt(ymax * f / 1.1)));
    }
    svg.appendChild(svgEl("text", { x: L - 4, y: H - B + 4, "text-anchor": "end" }, "0"));
    svg.appendChild(svgEl("text", { x: L, y: H - 8 }, "0 s"));
    svg.appendChild(svgEl("text", { x: W - R, y: H - 8, "text-anchor": "end" }, `${xmax.toFixed(0)} s`));
    h.classes.forEach((c, i) => {
      let d = "";
      let pen = "M";
      h.points.forEach((p, j) => {
        const v = (p.by_class[c] || {})[key];
        if (v === null || v === undefined) {
          pen = "M";
          return;
        }
        d += `${pen}${x(xs[j]).toFixed(1)},${y(v).toFixed(1)}`;
        pen = "L";
      });
      if (!d) return;
      const color = COLORS[i % COLORS.length];
      svg.appendChild(svgEl("path", { d, stroke: color, "stroke-width": "2", fill: "none", "data-class": c }));
      // Lone points (a gap on both sides) would be invisible as a path: mark every point.
      h.points.forEach((p, j) => {
        const v = (p.by_class[c] || {})[key];
        if (v !== null && v !== undefined)
          svg.appendChild(svgEl("circle", { cx: x(xs[j]), cy: y(v), r: 2, fill: color }));
      });
    });
    fig.appendChild(svg);
    return fig;
  }

  // Locust's start form has its own "Profile" (a label that groups test runs) beside
  // agentload's "Agent Profile": two profile fields read as one too many. Hide Locust's
  // (its --profile still works on the command line); the form then has one profile field.
  function hideLocustProfile() {
    for (const input of document.querySelectorAll('input[name="profile"]')) {
      const box = input.closest(".MuiAutocomplete-root") || input.closest(".MuiFormControl-root");
      if (box && box.style.display !== "none") box.style.display = "none";
    }
  }

  let queued = false;
  function apply() {
    queued = false;
    hideLocustProfile();
    fold();
    refreshCharts();
  }
  new MutationObserver(() => {
    if (!queued) {
      queued = true;
      requestAnimationFrame(apply);
    }
  }).observe(document.body, { childList: true, subtree: true, characterData: true });
  setInterval(refreshCharts, POLL_MS);
})();
