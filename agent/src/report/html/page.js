"use strict";
// waitmeter's one-file report: everything here is drawn from the JSON in #data. Text from the
// target (thread names, frames) only ever goes in as textContent.
(function () {
  const started = performance.now();
  const errors = document.getElementById("errors");
  window.addEventListener("error", (e) => {
    errors.hidden = false;
    errors.textContent += "error: " + e.message + "\n";
  });
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  const names = new Map(D.threads.map((t) => [t.tid, t.name]));
  const who = (k) => {
    if (k > 0) return names.has(k) ? names.get(k) + " (" + k + ")" : "thread " + k;
    if (k === -1) return "nothing (an idle CPU)";
    if (k <= -2) return "process " + (-2 - k);
    return "";
  };
  const dur = (us) => {
    const ms = us / 1000;
    if (ms >= 1000) return (ms / 1000).toFixed(3) + " s";
    return ms.toFixed(ms < 10 ? 3 : 1) + " ms";
  };
  const pct = (x) => (100 * x).toFixed(0) + "%";
  const tip = $("tip");
  const showTip = (ev, text) => {
    tip.textContent = text;
    tip.hidden = false;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = ev.clientY + 16 + tip.offsetHeight > window.innerHeight ? ev.clientY - tip.offsetHeight - 8 : ev.clientY + 16;
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = Math.max(0, y) + "px";
  };
  const hideTip = () => { tip.hidden = true; };

  // ---- header
  $("title").textContent = "waitmeter: " + D.comm + " (" + D.pid + ")";
  const facts = [dur(D.window_us) + " window"];
  if (D.start_unix_s) facts.push("from " + new Date(D.start_unix_s * 1000).toISOString());
  for (const f of [D.python, D.container, D.environment]) if (f) facts.push(f);
  facts.push(D.threads.length + " threads");
  $("facts").textContent = facts.join(" · ");

  // ---- timeline
  const view = { from: 0, to: Math.max(1, D.window_us), mark: null };
  const MIN_SPAN_US = 500;
  const rows = [];
  const tids = D.threads.map((t) => t.tid);
  for (const k of Object.keys(D.rows)) if (!names.has(+k)) tids.push(+k);
  const legend = $("legend");
  D.states.forEach((s, i) => {
    const item = el("span");
    const sw = el("i");
    sw.style.background = D.colours[i];
    item.append(sw, document.createTextNode(s));
    legend.append(item);
  });
  const box = $("timeline");
  for (const tid of tids) {
    const row = el("div", "row");
    row.dataset.tid = tid;
    const label = el("div", "label", names.has(tid) ? names.get(tid) + " " + tid : "thread " + tid);
    label.title = label.textContent;
    const canvas = el("canvas");
    row.append(label, canvas);
    box.append(row);
    rows.push({ tid, row, canvas, cells: D.rows[String(tid)] || [] });
  }
  const dpr = window.devicePixelRatio || 1;

  // the first cell that ends after `t` (cells are in time order and do not overlap)
  const firstAfter = (cells, t) => {
    let lo = 0, hi = cells.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cells[mid][0] + cells[mid][1] <= t) lo = mid + 1; else hi = mid;
    }
    return lo;
  };

  function drawRow(r) {
    const w = Math.max(1, Math.round(r.canvas.clientWidth * dpr));
    const h = Math.round(16 * dpr);
    if (r.canvas.width !== w) r.canvas.width = w;
    if (r.canvas.height !== h) r.canvas.height = h;
    const ctx = r.canvas.getContext("2d");
    ctx.clearRect(0, 0, w, h);
    const scale = w / (view.to - view.from);
    const drawn = [];
    const marked = view.mark && view.mark.tids.includes(r.tid);
    for (let i = firstAfter(r.cells, view.from); i < r.cells.length; i++) {
      const [s, d, st, x] = r.cells[i];
      if (s >= view.to) break;
      const a = Math.max(s, view.from), b = Math.min(s + d, view.to);
      const x0 = Math.floor((a - view.from) * scale);
      const x1 = Math.max(x0 + 1, Math.ceil((b - view.from) * scale));
      if (Array.isArray(x)) {
        // a fold: each state's share, stacked
        const total = x.reduce((p, q) => p + q, 0) || 1;
        let y = 0;
        x.forEach((u, j) => {
          if (!u) return;
          const hh = (u / total) * h;
          ctx.fillStyle = D.colours[j];
          ctx.fillRect(x0, y, x1 - x0, Math.ceil(hh));
          y += hh;
        });
      } else {
        ctx.fillStyle = D.colours[st];
        ctx.fillRect(x0, 0, x1 - x0, h);
      }
      if (marked && st === view.mark.state) {
        ctx.fillStyle = "#000";
        ctx.fillRect(x0, h - 2 * dpr, x1 - x0, 2 * dpr);
      }
      const last = drawn[drawn.length - 1];
      if (last && last[2] === st && Math.abs(last[1] - a) < 1) last[1] = b; else drawn.push([a, b, st]);
    }
    // what is drawn, for a reader of the page: start-end in ms and the state, merged
    r.row.dataset.drawn = drawn.length <= 5000
      ? drawn.map((c) => (c[0] / 1000).toFixed(3) + "-" + (c[1] / 1000).toFixed(3) + ":" + D.states[c[2]]).join(" ")
      : "";
  }

  function drawAxis() {
    const axis = $("axis");
    axis.textContent = "";
    const span = view.to - view.from;
    const steps = [1, 2, 5];
    let step = 1;
    for (let m = 1; step * 8 < span; m *= 10) for (const k of steps) if (step * 8 < span) step = k * m;
    const width = axis.clientWidth || 1;
    for (let t = Math.ceil(view.from / step) * step; t <= view.to; t += step) {
      const tick = el("span", null, dur(t));
      tick.style.left = ((t - view.from) / span) * width + "px";
      axis.append(tick);
    }
    $("range").textContent = dur(view.from) + " – " + dur(view.to) + " (" + dur(span) + ")";
  }

  function draw() {
    for (const r of rows) drawRow(r);
    drawAxis();
  }

  function zoom(from, to) {
    let a = Math.max(0, from), b = Math.min(D.window_us, to);
    if (b - a < MIN_SPAN_US) {
      const mid = (a + b) / 2;
      a = Math.max(0, mid - MIN_SPAN_US / 2);
      b = Math.min(D.window_us, a + MIN_SPAN_US);
    }
    if (b <= a) return;
    view.from = a;
    view.to = b;
    draw();
  }
  const whole = () => zoom(0, D.window_us);
  $("whole").addEventListener("click", whole);
  $("zoom-in").addEventListener("click", () => {
    const q = (view.to - view.from) / 4;
    zoom(view.from + q, view.to - q);
  });
  $("zoom-out").addEventListener("click", () => {
    const q = (view.to - view.from) / 2;
    zoom(view.from - q, view.to + q);
  });

  const timeAt = (r, ev) => {
    const rect = r.canvas.getBoundingClientRect();
    return view.from + ((ev.clientX - rect.left) / Math.max(1, rect.width)) * (view.to - view.from);
  };
  let drag = null;
  for (const r of rows) {
    r.canvas.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const t = timeAt(r, ev);
      const f = ev.deltaY > 0 ? 1.25 : 0.8;
      zoom(t - (t - view.from) * f, t + (view.to - t) * f);
    }, { passive: false });
    r.canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, from: view.from, to: view.to, w: r.canvas.clientWidth }; });
    r.canvas.addEventListener("dblclick", whole);
    r.canvas.addEventListener("mousemove", (ev) => {
      if (drag) return;
      const t = timeAt(r, ev);
      const i = firstAfter(r.cells, t);
      const c = r.cells[i];
      if (!c || c[0] > t) { hideTip(); return; }
      const [s, d, st, x] = c;
      const lines = [(names.get(r.tid) || "thread") + " (" + r.tid + ")",
        dur(s) + " – " + dur(s + d) + " (" + dur(d) + ")"];
      if (Array.isArray(x)) {
        const total = x.reduce((p, q) => p + q, 0) || 1;
        lines.push("intervals shorter than " + D.folded_below_ms + " ms, folded (each state's share): " +
          x.map((u, j) => [u, j]).filter((p) => p[0] > 0).sort((p, q) => q[0] - p[0])
            .map((p) => D.states[p[1]] + " " + pct(p[0] / total)).join(", "));
      } else {
        lines.push(D.states[st] + (x ? " behind " + who(x) : ""));
        const code = D.code[r.tid + "|" + st + "|" + (x > 0 ? x : 0)];
        if (code && code.victim) lines.push("waited in " + code.victim[0] + " (" + pct(code.victim[1]) + " of such waits)");
        if (code && code.culprit) lines.push(who(x) + " ran " + code.culprit[0] + " (" + pct(code.culprit[1]) + " of that time)");
      }
      showTip(ev, lines.join("\n"));
    });
    r.canvas.addEventListener("mouseleave", hideTip);
  }
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const dt = ((ev.clientX - drag.x) / Math.max(1, drag.w)) * (drag.to - drag.from);
    const span = drag.to - drag.from;
    const from = Math.min(Math.max(0, drag.from - dt), D.window_us - span);
    view.from = from;
    view.to = from + span;
    draw();
  });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("resize", draw);

  const notes = ["Intervals shorter than " + D.folded_below_ms + " ms are folded into cells of at least that long, " +
    "drawn as each state's share (" + D.spans_folded + " of " + D.spans + " intervals)."];
  if (D.spans_lost) notes.push(D.spans_lost + " intervals were lost (the ring buffer was full): the drawing has gaps there.");
  $("folded").textContent = notes.join(" ");

  // ---- verdict: each finding shows its threads and the moment of its longest wait
  function focus(f, li) {
    for (const x of document.querySelectorAll("#verdict li")) x.classList.toggle("on", x === li);
    const on = new Set(f.threads);
    for (const r of rows) {
      r.row.classList.toggle("hl", on.has(r.tid));
      r.row.classList.toggle("dim", on.size > 0 && !on.has(r.tid));
    }
    view.mark = f.state === null || f.state === undefined ? null : { tids: f.threads.slice(0, 1), state: f.state };
    let longest = null;
    const victim = rows.find((r) => r.tid === f.threads[0]);
    if (victim && view.mark) {
      for (const c of victim.cells) if (c[2] === f.state && !Array.isArray(c[3]) && (!longest || c[1] > longest[1])) longest = c;
    }
    if (longest) zoom(longest[0] - 2 * longest[1], longest[0] + 3 * longest[1]); else draw();
    $("timeline-section").scrollIntoView({ block: "start" });
  }
  const ol = $("verdict");
  for (const f of D.verdict) {
    const li = el("li", null, f.text);
    li.dataset.kind = f.kind;
    li.dataset.threads = f.threads.join(",");
    li.addEventListener("click", () => focus(f, li));
    ol.append(li);
  }
  if (!D.verdict.length) ol.append(el("li", null, "no finding"));

  // ---- blame graph
  (function blame() {
    // the edges that matter: a wait of at least 2% of the largest
    const top = Math.max(0, ...D.blame.map((e) => e.s));
    const edges = D.blame.filter((e) => e.s >= 0.02 * top);
    const host = $("blame");
    if (!edges.length) { host.append(el("p", "note", "No thread waited behind another.")); return; }
    const nodes = [];
    const index = new Map();
    const node = (key, label) => {
      if (!index.has(key)) { index.set(key, nodes.length); nodes.push(label); }
      return index.get(key);
    };
    const label = (k) => (/^\d+$/.test(k) ? who(+k) : k);
    for (const e of edges) { e.a = node(String(e.victim), who(e.victim)); e.b = node(e.culprit, label(e.culprit)); }
    const W = 760, H = Math.max(260, 60 * nodes.length), R = Math.min(W, H) / 2 - 60;
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    const defs = document.createElementNS(NS, "defs");
    svg.append(defs);
    const pos = nodes.map((_, i) => {
      const a = (2 * Math.PI * i) / nodes.length - Math.PI / 2;
      return [W / 2 + R * 1.4 * Math.cos(a), H / 2 + R * Math.sin(a)];
    });
    const max = Math.max(...edges.map((e) => e.s));
    const kinds = { gil_wait: 3, futex_wait: 4, runqueue: 1 };
    for (const [kind, si] of Object.entries(kinds)) {
      const m = document.createElementNS(NS, "marker");
      m.setAttribute("id", "arrow-" + kind);
      m.setAttribute("viewBox", "0 0 10 10");
      m.setAttribute("refX", "10");
      m.setAttribute("refY", "5");
      m.setAttribute("markerWidth", "5");
      m.setAttribute("markerHeight", "5");
      m.setAttribute("orient", "auto");
      const p = document.createElementNS(NS, "path");
      p.setAttribute("d", "M0,0L10,5L0,10z");
      p.setAttribute("fill", D.colours[si]);
      m.append(p);
      defs.append(m);
    }
    for (const e of edges) {
      const [x1, y1] = pos[e.a], [x2, y2] = pos[e.b];
      const mx = (x1 + x2) / 2 + (y2 - y1) * 0.2, my = (y1 + y2) / 2 - (x2 - x1) * 0.2;
      const path = document.createElementNS(NS, "path");
      path.setAttribute("d", "M" + x1 + "," + y1 + " Q" + mx + "," + my + " " + x2 + "," + y2);
      path.setAttribute("fill", "none");
      path.setAttribute("stroke", D.colours[kinds[e.kind]]);
      path.setAttribute("stroke-opacity", "0.8");
      path.setAttribute("stroke-width", String(1 + 10 * Math.sqrt(e.s / max)));
      path.setAttribute("marker-end", "url(#arrow-" + e.kind + ")");
      path.setAttribute("class", "edge");
      const title = document.createElementNS(NS, "title");
      title.textContent = who(e.victim) + " waited " + e.s.toFixed(3) + " s (" + e.kind + ") behind " + label(e.culprit);
      path.append(title);
      svg.append(path);
    }
    nodes.forEach((n, i) => {
      const [x, y] = pos[i];
      const c = document.createElementNS(NS, "circle");
      c.setAttribute("cx", x);
      c.setAttribute("cy", y);
      c.setAttribute("r", "6");
      c.setAttribute("fill", "#444");
      const t = document.createElementNS(NS, "text");
      t.setAttribute("x", x + 9);
      t.setAttribute("y", y + 4);
      t.setAttribute("font-size", "12");
      t.textContent = n;
      svg.append(c, t);
    });
    host.append(svg);
  })();

  // ---- wait flame graph (root on top)
  (function flame() {
    const host = $("flame");
    if (!D.flame.length) { host.append(el("p", "note", "No wait stacks in this window (stacks were off, nothing waited, or this is run's kept timeline, which keeps no stacks).")); return; }
    const sel = { thread: $("f-thread"), state: $("f-state"), role: $("f-role") };
    const option = (s, value, text) => { const o = el("option", null, text); o.value = value; s.append(o); };
    option(sel.thread, "", "all");
    for (const t of [...new Set(D.flame.map((e) => e.whose))]) option(sel.thread, String(t), t ? who(t) : "unknown");
    option(sel.state, "", "all");
    for (const s of [...new Set(D.flame.map((e) => e.state))].sort()) option(sel.state, String(s), D.states[s]);
    option(sel.role, "", "all");
    for (const r of [...new Set(D.flame.map((e) => e.role))]) option(sel.role, r, r);
    const canvas = el("canvas");
    host.append(canvas);
    let root = null, top = null;
    function build() {
      root = { name: "all", v: 0, kids: new Map(), parent: null };
      for (const e of D.flame) {
        if (sel.thread.value && String(e.whose) !== sel.thread.value) continue;
        if (sel.state.value && String(e.state) !== sel.state.value) continue;
        if (sel.role.value && e.role !== sel.role.value) continue;
        let n = root;
        n.v += e.s;
        const path = [(e.whose ? who(e.whose) : "unknown") + " · " + D.states[e.state] + " · " + e.role, ...e.frames];
        for (const f of path) {
          if (!n.kids.has(f)) n.kids.set(f, { name: f, v: 0, kids: new Map(), parent: n });
          n = n.kids.get(f);
          n.v += e.s;
        }
      }
      top = root;
      drawFlame();
    }
    const RH = 17;
    let boxes = [];
    function depth(n) { let d = 0; for (const k of n.kids.values()) d = Math.max(d, depth(k)); return d + 1; }
    function drawFlame() {
      const w = Math.max(1, canvas.clientWidth);
      const rowsN = Math.min(60, depth(top));
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(rowsN * RH * dpr);
      canvas.style.height = rowsN * RH + "px";
      const ctx = canvas.getContext("2d");
      ctx.scale(dpr, dpr);
      ctx.font = "11px ui-monospace, monospace";
      boxes = [];
      const hue = (s) => { let h = 0; for (const ch of s) h = (h * 31 + ch.charCodeAt(0)) % 360; return h; };
      (function walk(n, x, wd, d) {
        if (d >= rowsN || wd < 0.5) return;
        ctx.fillStyle = n === top ? "#bbb" : "hsl(" + (20 + (hue(n.name) % 40)) + ",75%," + (60 + (hue(n.name) % 15)) + "%)";
        ctx.fillRect(x, d * RH, Math.max(0.5, wd - 1), RH - 1);
        if (wd > 30) {
          ctx.fillStyle = "#000";
          ctx.save();
          ctx.beginPath();
          ctx.rect(x, d * RH, wd - 2, RH);
          ctx.clip();
          ctx.fillText(n.name, x + 3, d * RH + 12);
          ctx.restore();
        }
        boxes.push({ n, x, y: d * RH, w: wd });
        let cx = x;
        const kids = [...n.kids.values()].sort((a, b) => b.v - a.v);
        for (const k of kids) { const kw = (k.v / n.v) * wd; walk(k, cx, kw, d + 1); cx += kw; }
      })(top, 0, w, 0);
    }
    const hit = (ev) => {
      const r = canvas.getBoundingClientRect();
      const x = ev.clientX - r.left, y = ev.clientY - r.top;
      return boxes.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + RH);
    };
    canvas.addEventListener("mousemove", (ev) => {
      const b = hit(ev);
      if (!b) { hideTip(); return; }
      showTip(ev, b.n.name + "\n" + b.n.v.toFixed(3) + " s waited, " + pct(b.n.v / Math.max(1e-12, root.v)) + " of the graph");
    });
    canvas.addEventListener("mouseleave", hideTip);
    canvas.addEventListener("click", (ev) => { const b = hit(ev); if (b) { top = b.n === top && top.parent ? top.parent : b.n; drawFlame(); } });
    $("f-reset").addEventListener("click", () => { top = root; drawFlame(); });
    for (const s of Object.values(sel)) s.addEventListener("change", build);
    window.addEventListener("resize", drawFlame);
    build();
  })();

  // a view asked for in the address: #from=MS&to=MS
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.has("from") && hash.has("to")) zoom(+hash.get("from") * 1000, +hash.get("to") * 1000); else draw();
  window.waitmeter = { data: D, view, zoom, draw };
  // how long the page took to draw itself, for a reader of the page (bench/, tests/test_html.py):
  // its script, and from the start of its loading (reading the file, parsing it, the script)
  document.body.dataset.scriptMs = (performance.now() - started).toFixed(0);
  document.body.dataset.renderMs = performance.now().toFixed(0);
  document.body.dataset.ready = "1";
})();
