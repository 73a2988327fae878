"use strict";
// The episode viewer's script (adapters/evaluation/viewer.py writes it into the page).
// Every string of the data (completions, prompts, reasons, labels) enters the document through
// Node.append / textContent, i.e. as text: nothing here parses HTML or builds a URL from data.
(function () {
  const app = document.getElementById("app");
  const state = { view: "episodes", setting: "", run: "", outcome: "", role: "", left: 0, right: 0, change: "" };
  let data = null;
  const cards = []; // [details element, episode]
  const pairCards = []; // [details element, change]

  function el(tag, cls, ...kids) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    for (const k of kids) {
      if (k === null || k === undefined || k === false) continue;
      node.append(k instanceof Node ? k : String(k));
    }
    return node;
  }

  function fmt(x, digits) {
    if (x === null || x === undefined || typeof x !== "number" || !isFinite(x)) return "\u2014";
    return x.toFixed(digits === undefined ? 3 : digits);
  }

  function mean(xs) {
    const v = xs.filter((x) => typeof x === "number" && isFinite(x));
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
  }

  async function load() {
    const bin = atob(document.getElementById("data").textContent.trim());
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  function select(label, options, value, onChange) {
    const s = el("select");
    for (const [v, text] of options) {
      const o = el("option", null, text);
      o.value = String(v);
      s.append(o);
    }
    s.value = String(value);
    s.addEventListener("change", () => onChange(s.value));
    return el("label", null, label, s);
  }

  // ------------------------------------------------------------------ boards
  function board(grid) {
    const g = el("div", "board");
    g.style.gridTemplateColumns = `repeat(${Number(grid.w) | 0}, auto)`;
    const boxes = Array.isArray(grid.boxes) ? grid.boxes.map((x) => Number(x) | 0) : null;
    grid.cells.forEach((p, i) => {
      const cell = data.palette[p] || {};
      const r = Math.floor(i / grid.w);
      const c = i % grid.w;
      const node = el("div", "cell bg-" + safe(cell.background));
      if (boxes && boxes[0] && r % boxes[0] === 0 && r) node.classList.add("bt");
      if (boxes && boxes[1] && c % boxes[1] === 0 && c) node.classList.add("bl");
      if (cell.marker) node.append(el("span", "mk mk-" + safe(cell.marker)));
      if (cell.disc) node.append(el("span", "dc dc-" + safe(cell.disc)));
      if (cell.glyph) node.append(el("span", "gl gl-" + safe(cell.glyph_color), cell.glyph));
      g.append(node);
    });
    return g;
  }

  function safe(name) {
    // colour names are class-name suffixes: anything else becomes "x" (no colour)
    return /^[a-z_]{1,32}$/.test(String(name)) ? String(name) : "x";
  }

  function boardBox(caption, grid) {
    return el("div", "boardbox", caption, board(grid));
  }

  function legend(ep) {
    const names = new Set();
    for (const grid of ep.grids) {
      for (const p of grid.cells) {
        const cell = data.palette[p] || {};
        for (const key of ["background", "marker", "disc"]) if (cell[key]) names.add(cell[key]);
        if (cell.glyph) names.add(cell.glyph_color + " digit");
      }
    }
    const box = el("div", "legend");
    for (const n of [...names].sort()) {
      const base = n.endsWith(" digit") ? n.slice(0, -6) : n;
      box.append(el("span", null, el("span", "sw sw-" + safe(base)), n.replace(/_/g, " ")));
    }
    return box;
  }

  // ------------------------------------------------------------------ one step
  function partsTable(parts) {
    const t = el("table", "parts");
    t.append(el("tr", null, el("th", null, "component"), el("th", "num", "weight"),
      el("th", "num", "score"), el("th", "num", "weighted"), el("th", null, "reason")));
    const comps = parts.components || {};
    const coefs = parts.coefficients || {};
    const reasons = parts.reasons || {};
    for (const k of Object.keys(coefs)) {
      const w = coefs[k];
      const v = comps[k];
      t.append(el("tr", null, el("td", null, k), el("td", "num", fmt(w, 2)), el("td", "num", fmt(v)),
        el("td", "num", typeof w === "number" && typeof v === "number" ? fmt(w * v) : "\u2014"),
        el("td", null, reasons[k] === undefined ? "" : String(reasons[k]))));
    }
    for (const k of Object.keys(reasons)) {
      if (!(k in coefs)) t.append(el("tr", null, el("td", null, k), el("td"), el("td"), el("td"), el("td", null, String(reasons[k]))));
    }
    return t;
  }

  function mixing(parts) {
    const m = String(parts.mixing || "convex");
    let text;
    if (m === "convex") {
      text = `reward = \u03bb\u00b7team + (1\u2212\u03bb)\u00b7mask\u00b7local = ${fmt(parts.lam, 2)}\u00b7${fmt(parts.team)} + ${fmt(1 - parts.lam, 2)}\u00b7${fmt(parts.mask, 0)}\u00b7${fmt(parts.local)} = ${fmt(parts.reward)}`;
    } else if (m === "additive") {
      text = `reward = \u03b1\u00b7team + local = ${fmt(parts.alpha, 2)}\u00b7${fmt(parts.team)} + ${fmt(parts.local)} = ${fmt(parts.reward)}`;
    } else {
      text = `reward = local = ${fmt(parts.reward)}`;
    }
    return el("div", "mixing", text);
  }

  function stepBlock(ep, i, run) {
    const s = ep.steps[i];
    const block = el("div", "step");
    block.dataset.role = String(s.role);
    const head = el("div", "stephead", el("b", null, `step ${s.step}`));
    if (s.turn !== null && s.turn !== undefined) head.append(el("span", "muted", `turn ${s.turn}`));
    head.append(el("span", "role", String(s.role)));
    head.append(el("span", null, "reward ", el("b", null, fmt(s.reward))));
    if (s.replayed !== undefined && s.replayed !== null && s.reward !== null && Math.abs(s.replayed - s.reward) > 1e-9) {
      head.append(el("span", "bad", `replayed ${fmt(s.replayed)}`));
    }
    if (s.progress !== undefined && s.progress !== null) {
      head.append(el("span", "muted", `${run.progress_label} after: ${fmt(s.progress, 2)}`));
    }
    if (s.untrainable) head.append(el("span", "tag", "not a training sample: " + String(s.untrainable)));
    block.append(head);
    if (s.awarded_at !== undefined) {
      const prov = s.provisional_parts ? fmt(s.provisional_parts.reward) : "?";
      block.append(el("div", "muted", `delayed award: the final reward arrived at step ${s.awarded_at} (provisional ${prov})`));
    }
    for (const a of s.awards || []) {
      block.append(el("div", "muted", `this step paid the final reward of step ${a.for_step} (${a.agent}): ${fmt(a.reward)}`));
    }
    if (ep.grids && ep.grids[i + 1]) {
      const same = JSON.stringify(ep.grids[i].cells) === JSON.stringify(ep.grids[i + 1].cells);
      block.append(same ? el("div", "boards", boardBox("board (this step changed nothing on it)", ep.grids[i + 1]))
        : el("div", "boards", boardBox("before", ep.grids[i]), boardBox("after", ep.grids[i + 1])));
    }
    if (s.prompt !== null && s.prompt !== undefined) {
      const d = el("details", "prompt", el("summary", null, `prompt (${String(s.prompt).length} characters)`));
      d.append(el("pre", null, String(s.prompt)));
      block.append(d);
    }
    block.append(el("pre", "completion", s.completion === "" ? "(empty completion)" : String(s.completion)));
    if (s.parts && typeof s.parts === "object") {
      block.append(partsTable(s.parts), mixing(s.parts));
    }
    return block;
  }

  // ------------------------------------------------------------------ episodes view
  function outcome(ep, run) {
    return el("span", null, ep.success ? el("span", "ok", "\u2713 success") : el("span", "bad", "\u2717 no success"),
      ` \u00b7 ${run.progress_label} ${fmt(ep.progress, 2)} \u00b7 team ${fmt(ep.team)}`);
  }

  function episodeBody(ep, run) {
    const body = el("div", "body");
    if (ep.note) body.append(el("div", "warn", String(ep.note)));
    const returns = Object.entries(ep.returns || {}).map(([r, v]) => `${r} ${fmt(v)}`).join(", ");
    body.append(el("div", "muted", `policies: ${policiesText(run)}; returns: ${returns}`));
    if (ep.grids && ep.grids.length) body.append(legend(ep));
    if (ep.grids && !ep.steps.length) body.append(boardBox("start", ep.grids[0]));
    ep.steps.forEach((_, i) => body.append(stepBlock(ep, i, run)));
    if (!ep.steps.length) body.append(el("p", "muted", "no steps recorded"));
    return body;
  }

  function episodeCard(ep, k) {
    const run = data.runs[ep.run];
    const card = el("details", "episode");
    card.id = `episode-${k}`;
    card.append(el("summary", null, el("span", "tag", String(run.label)), `${run.setting}:${run.mode}`,
      el("span", null, `instance #${ep.index}`, el("span", "muted", ` ${ep.instance_id}`)), outcome(ep, run),
      el("span", "muted", `${ep.steps.length} steps`), ep.note ? el("span", "bad", "\u26a0") : null));
    card.addEventListener("toggle", () => {
      if (card.open && !card.dataset.filled) {
        card.dataset.filled = "1";
        card.append(episodeBody(ep, run));
        applyRole(card);
      }
    });
    return card;
  }

  function applyRole(root) {
    for (const node of root.querySelectorAll(".step")) {
      node.classList.toggle("hidden", !!state.role && node.dataset.role !== state.role);
    }
  }

  function applyFilters() {
    let shown = 0;
    for (const [card, ep] of cards) {
      const run = data.runs[ep.run];
      const ok = (!state.setting || run.setting === state.setting) && (!state.run || String(ep.run) === state.run) &&
        (!state.outcome || (state.outcome === "success") === !!ep.success) &&
        (!state.role || ep.steps.some((s) => s.role === state.role));
      card.classList.toggle("hidden", !ok);
      if (ok) shown++;
      applyRole(card);
    }
    document.getElementById("count").textContent = `showing ${shown} of ${cards.length} episodes`;
  }

  // ------------------------------------------------------------------ compare view
  function key(ep) {
    return `${ep.index}|${ep.instance_id}`;
  }

  function change(a, b) {
    const va = [a.success ? 1 : 0, a.progress || 0, a.team || 0];
    const vb = [b.success ? 1 : 0, b.progress || 0, b.team || 0];
    for (let i = 0; i < 3; i++) {
      if (vb[i] > va[i] + 1e-9) return "improved";
      if (vb[i] < va[i] - 1e-9) return "worsened";
    }
    return "same";
  }

  function pairBody(a, b) {
    const ra = data.runs[a.run];
    const rb = data.runs[b.run];
    const cols = el("div", "cols");
    const left = el("div", null, el("h2", null, String(ra.label)));
    const right = el("div", null, el("h2", null, String(rb.label)));
    for (const [ep, col] of [[a, left], [b, right]]) {
      if (ep.note) col.append(el("div", "warn", String(ep.note)));
    }
    const n = Math.max(a.steps.length, b.steps.length);
    for (let i = 0; i < n; i++) {
      const differs = !a.steps[i] || !b.steps[i] || a.steps[i].completion !== b.steps[i].completion;
      for (const [ep, col, run] of [[a, left, ra], [b, right, rb]]) {
        if (!ep.steps[i]) {
          col.append(el("div", "step muted", "(the episode had ended)"));
          continue;
        }
        const block = stepBlock(ep, i, run);
        if (differs) block.classList.add("changed");
        col.append(block);
      }
    }
    cols.append(left, right);
    return el("div", "body", cols);
  }

  function renderCompare() {
    const box = document.getElementById("compare");
    box.replaceChildren();
    pairCards.length = 0;
    const left = data.episodes.filter((e) => e.run === state.left);
    const right = new Map(data.episodes.filter((e) => e.run === state.right).map((e) => [key(e), e]));
    const ra = data.runs[state.left];
    const rb = data.runs[state.right];
    let k = 0;
    for (const a of left) {
      const b = right.get(key(a));
      if (!b) continue;
      const ch = change(a, b);
      const card = el("details", "pair");
      card.id = `pair-${k++}`;
      card.append(el("summary", null, el("span", "tag", ch), `${ra.setting}:${ra.mode}`, `instance #${a.index}`,
        el("span", null, `${ra.label}: `, outcome(a, ra)), el("span", null, `${rb.label}: `, outcome(b, rb))));
      card.addEventListener("toggle", () => {
        if (card.open && !card.dataset.filled) {
          card.dataset.filled = "1";
          card.append(pairBody(a, b));
          applyRole(card);
        }
      });
      pairCards.push([card, ch]);
      box.append(card);
    }
    if (!pairCards.length) box.append(el("p", "muted", "these two evaluations share no instance"));
    applyChange();
  }

  function applyChange() {
    let shown = 0;
    for (const [card, ch] of pairCards) {
      const ok = !state.change || state.change === ch || (state.change === "changed" && ch !== "same");
      card.classList.toggle("hidden", !ok);
      if (ok) shown++;
      applyRole(card);
    }
    document.getElementById("count").textContent = `showing ${shown} of ${pairCards.length} instances`;
  }

  // ------------------------------------------------------------------ page
  function policiesText(run) {
    const names = [...new Set(Object.values(run.policies))];
    return names.length === 1 ? String(names[0]) : Object.entries(run.policies).map(([r, p]) => `${r}=${p}`).join(", ");
  }

  function summaryTable() {
    const t = el("table");
    const showPolicies = data.runs.some((r) => policiesText(r) !== String(r.label));
    t.append(el("tr", null, el("th", null, "evaluation"), el("th", null, "setting"), el("th", "num", "episodes"),
      el("th", "num", "success"), el("th", null, "progress measure"), el("th", "num", "progress"),
      el("th", "num", "team reward"), el("th", "num", "shaped reward"), showPolicies ? el("th", null, "policies") : null));
    for (const run of data.runs) {
      const eps = data.episodes.filter((e) => e.run === run.id);
      t.append(el("tr", null, el("td", null, String(run.label)), el("td", null, `${run.setting}:${run.mode}`),
        el("td", "num", String(eps.length)), el("td", "num", fmt(mean(eps.map((e) => (e.success ? 1 : 0))), 2)),
        el("td", null, String(run.progress_label)), el("td", "num", fmt(mean(eps.map((e) => e.progress)), 2)),
        el("td", "num", fmt(mean(eps.map((e) => e.team)))), el("td", "num", fmt(mean(eps.map((e) => e.reward)))),
        showPolicies ? el("td", "muted", policiesText(run)) : null));
    }
    return t;
  }

  function controls() {
    const bar = el("div", "controls");
    const settings = [...new Set(data.runs.map((r) => r.setting))];
    const roles = [...new Set(data.episodes.flatMap((e) => e.steps.map((s) => s.role)))];
    const runOptions = data.runs.map((r) => [r.id, `${r.label} (${r.setting}:${r.mode})`]);
    const episodesOnly = [];
    const compareOnly = [];
    bar.append(select("view", [["episodes", "episodes"], ["compare", "compare two evaluations"]], state.view, (v) => {
      state.view = v;
      show();
    }));
    episodesOnly.push(select("setting", [["", "all"], ...settings.map((s) => [s, s])], state.setting, (v) => {
      state.setting = v;
      applyFilters();
    }));
    episodesOnly.push(select("evaluation", [["", "all"], ...runOptions], state.run, (v) => {
      state.run = v;
      applyFilters();
    }));
    episodesOnly.push(select("outcome", [["", "all"], ["success", "success"], ["failure", "no success"]], state.outcome, (v) => {
      state.outcome = v;
      applyFilters();
    }));
    compareOnly.push(select("left", runOptions, state.left, (v) => {
      state.left = Number(v);
      renderCompare();
    }));
    compareOnly.push(select("right", runOptions, state.right, (v) => {
      state.right = Number(v);
      renderCompare();
    }));
    compareOnly.push(select("instances", [["", "all"], ["changed", "changed"], ["improved", "improved"], ["worsened", "worsened"], ["same", "same"]], state.change, (v) => {
      state.change = v;
      applyChange();
    }));
    const role = select("role", [["", "all"], ...roles.map((r) => [r, r])], state.role, (v) => {
      state.role = v;
      if (state.view === "compare") applyChange();
      else applyFilters();
    });
    for (const c of episodesOnly) c.classList.add("only-episodes");
    for (const c of compareOnly) c.classList.add("only-compare");
    const count = el("span", "count");
    count.id = "count";
    bar.append(...episodesOnly, ...compareOnly, role, count);
    return bar;
  }

  function show() {
    const compare = state.view === "compare";
    document.getElementById("episodes").classList.toggle("hidden", compare);
    document.getElementById("compare").classList.toggle("hidden", !compare);
    for (const n of document.querySelectorAll(".only-episodes")) n.classList.toggle("hidden", compare);
    for (const n of document.querySelectorAll(".only-compare")) n.classList.toggle("hidden", !compare);
    if (compare) renderCompare();
    else applyFilters();
  }

  function openFromHash() {
    const m = /^#(episode|pair)-(\d+)$/.exec(location.hash);
    if (!m) return;
    if (m[1] === "pair") {
      state.view = "compare";
      show();
    }
    const card = document.getElementById(`${m[1]}-${m[2]}`);
    if (card) {
      card.open = true;
      card.dispatchEvent(new Event("toggle"));
      card.scrollIntoView();
    }
  }

  function render() {
    const pair = data.compare && data.compare[0];
    if (pair) [state.left, state.right] = pair;
    app.replaceChildren();
    app.append(el("h1", null, String(data.title)));
    const n = data.runs.length;
    app.append(el("p", "muted", `${data.episodes.length} episodes in ${n} evaluation${n === 1 ? "" : "s"}. ` +
      "Click an episode for its steps: prompts, completions, rewards with their components, and boards."));
    app.append(summaryTable(), controls());
    const list = el("div");
    list.id = "episodes";
    data.episodes.forEach((ep, k) => {
      const card = episodeCard(ep, k);
      cards.push([card, ep]);
      list.append(card);
    });
    const cmp = el("div", "hidden");
    cmp.id = "compare";
    app.append(list, cmp);
    show();
    openFromHash();
  }

  load()
    .then((d) => {
      data = d;
      render();
      document.body.dataset.ready = "1";
    })
    .catch((err) => {
      app.replaceChildren(el("p", "bad", "could not read the page's data: " + String(err)));
      document.body.dataset.ready = "error";
      throw err;
    });
})();
