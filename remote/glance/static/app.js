// The glance page: reads the token from the URL's fragment (#t=...), polls the JSON
// endpoints with it (Authorization: Bearer), and draws every value as text: every
// string here came from a box or a provider, so it only ever reaches the document
// through textContent or an attribute, never as markup. Read-only: no action exists.
"use strict";

(function () {
  const POLL_MS = 10000;
  const LOG_BYTES = 16384;
  const SVG = "http://www.w3.org/2000/svg";
  const main = document.getElementById("main");
  const stamp = document.getElementById("stamp");
  let token = "";
  let chosen = {};
  let timer = null;
  let busy = false;

  function params() {
    const out = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      const at = part.indexOf("=");
      if (at > 0) {
        try {
          out[decodeURIComponent(part.slice(0, at))] = decodeURIComponent(part.slice(at + 1));
        } catch (e) { /* a malformed part is no parameter */ }
      }
    }
    return out;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const key of Object.keys(attrs)) node.setAttribute(key, String(attrs[key]));
    return node;
  }

  function fragment(run) {
    const base = "t=" + encodeURIComponent(token);
    return run ? base + "&run=" + encodeURIComponent(run) : base;
  }

  function tone(health) {
    if (health === "live" || health === "completed") return "good";
    if (health === "slow" || health === "stalled" || health === "starting") return "slow";
    if (health === "dead" || health === "failed" || health === "unreadable") return "bad";
    return "muted";
  }

  function badge(word, health) {
    return el("span", "badge " + tone(health), word || "?");
  }

  async function api(path) {
    const answer = await fetch(path, {
      headers: { Authorization: "Bearer " + token }, cache: "no-store",
      credentials: "omit", referrerPolicy: "no-referrer",
    });
    if (answer.status === 403) {
      throw new Error("the token was refused: open the link gpurent glance printed " +
                      "(a restart of gpurent glance makes a new one)");
    }
    if (!answer.ok) throw new Error("the server answered HTTP " + answer.status);
    return answer.json();
  }

  function when(at) {
    // 24-hour, as the server's "not reached since HH:MM" words are.
    return typeof at === "number" ?
      new Date(at * 1000).toLocaleTimeString([], {hourCycle: "h23"}) : "never";
  }

  function showStamp(head) {
    let text = head.at === null ? "gathering the first pass…" :
      "refreshed " + when(head.at) + ", every " + head.every + " s";
    if (head.error) text += " (last pass failed: " + head.error + ")";
    stamp.textContent = text;
  }

  function runCard(run) {
    const card = el("article", "card run" + (run.reached ? "" : " lost"));
    card.dataset.state = String(run.state || "");
    const top = el("div", "top");
    const name = el("a", "name", run.name);
    name.href = "#" + fragment(run.id);
    top.append(name, run.reached ? badge(run.health || run.state, run.health) :
      el("span", "badge slow", "not reached"));
    card.append(top);
    const w = run.words || {};
    if (w.noted) card.append(el("div", "line", w.noted));
    const progress = [w.epoch, w.eta].filter(Boolean).join(" · ");
    if (progress) card.append(el("div", "line", progress));
    const metric = [w.metric, w.best].filter(Boolean).join(" · ");
    if (metric) card.append(el("div", "line", metric));
    if (w.cost) card.append(el("div", "line", w.cost));
    const where = [run.target, run.state !== "unknown" && run.state, w.updated]
      .filter(Boolean).join(" · ");
    card.append(el("div", "line muted", where));
    card.append(el("div", run.reached ? "line muted" : "line warn", w.seen));
    if (w.why) card.append(el("div", "line warn", w.why));
    return card;
  }

  function instanceCard(row) {
    const card = el("article", "card inst" + (row.error ? " lost" : ""));
    const top = el("div", "top");
    top.append(el("span", "name", row.target || row.account));
    top.append(el("span", "badge " + (row.billing ? "slow" : "muted"),
                  row.error ? "failed" : row.state));
    card.append(top);
    card.append(el("div", "line muted", [row.account, row.gpu].filter(Boolean).join(" · ")));
    const bill = [row.bill_words, row.spent_words, row.uptime && "up " + row.uptime]
      .filter(Boolean).join(" · ");
    if (bill) card.append(el("div", "line", bill));
    if (row.reached) {
      card.append(el("div", "line muted", row.runs + " run" + (row.runs === 1 ? "" : "s") +
                     ", " + row.live_runs + " live"));
    }
    for (const said of row.words || []) {
      const bad = /NOT safe|unreachable|failed|taken away|billing/.test(said);
      card.append(el("div", bad ? "line warn" : "line", said));
    }
    return card;
  }

  function notice(text, cls) {
    main.replaceChildren(el("p", "notice " + (cls || ""), text));
  }

  async function home() {
    const [runs, instances] = await Promise.all([api("/api/runs"), api("/api/instances")]);
    showStamp(runs);
    const first = el("section");
    first.id = "runs";
    first.append(el("h2", "", "Runs (" + runs.runs.length + ")"));
    if (!runs.runs.length) {
      first.append(el("p", "muted", runs.at === null ? "gathering…" :
                      "no run known: none on a reached box, none launched from this laptop"));
    }
    for (const run of runs.runs) first.append(runCard(run));
    const second = el("section");
    second.id = "instances";
    second.append(el("h2", "", "Instances (" + instances.instances.filter(
      (r) => r.target).length + ")"));
    if (instances.billing) second.append(el("p", "line", instances.billing));
    for (const row of instances.instances) second.append(instanceCard(row));
    main.replaceChildren(first, second);
  }

  function numeric(table) {
    const skip = new Set(["epoch", "time", "validated", "is_best", "best_epoch",
                          "current_metric", "best_metric"]);
    return table.columns.filter((c) => !skip.has(c) && table.rows.some(
      (r) => typeof r[c] === "number" && Number.isFinite(r[c])));
  }

  function pick(table, status, id) {
    const columns = numeric(table);
    if (columns.includes(chosen[id])) return chosen[id];
    const best = "metrics/" + (status.best_metric_name || "");
    if (columns.includes(best)) return best;
    return columns.find((c) => c.startsWith("metrics/")) || columns[0];
  }

  function short(value) {
    const size = Math.abs(value);
    return size !== 0 && (size < 1e-3 || size >= 1e5) ? value.toExponential(2) :
      String(Number(value.toPrecision(3)));
  }

  function chart(table, column) {
    const W = 360, H = 190, L = 56, R = 10, T = 12, B = 26;
    const points = table.rows.map((r, i) => [typeof r.epoch === "number" ? r.epoch : i + 1,
                                             r[column]])
      .filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]));
    const box = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "img" });
    const title = svg("title", {});
    title.textContent = column;
    box.append(title);
    if (!points.length) {
      const none = svg("text", { x: L, y: H / 2 });
      none.textContent = "no values yet";
      box.append(none);
      return box;
    }
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
    let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    box.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
    box.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
    const labels = [[L - 4, T + 4, "end", y1], [L - 4, H - B, "end", y0],
                    [L, H - 8, "start", "epoch " + xs[0]],
                    [W - R, H - 8, "end", "epoch " + xs[xs.length - 1]]];
    for (const [x, y, anchor, value] of labels) {
      const label = svg("text", { x: x, y: y, "text-anchor": anchor });
      label.textContent = typeof value === "number" ? short(value) : value;
      box.append(label);
    }
    box.append(svg("polyline", {
      class: "curve", points: points.map((p) => sx(p[0]).toFixed(1) + "," +
                                          sy(p[1]).toFixed(1)).join(" "),
    }));
    const last = points[points.length - 1];
    box.append(svg("circle", { cx: sx(last[0]), cy: sy(last[1]), r: 3, class: "dot" }));
    return box;
  }

  function facts(status, words) {
    const list = el("dl", "facts");
    const g = status.gpurent || {};
    const rows = [["box", g.target], ["state", status.state], ["health", g.health],
                  ["why", g.reason], ["progress", [words.epoch, words.eta]
                    .filter(Boolean).join(" · ")],
                  ["metric", words.metric], ["best", words.best], ["cost", words.cost],
                  ["updated", words.updated], ["seen", words.seen], ["lost", words.why],
                  ["error", status.error && typeof status.error === "object" ?
                    [status.error.type, status.error.message].filter(Boolean).join(": ") :
                    null]];
    for (const [key, value] of rows) {
      if (value === undefined || value === null || value === "") continue;
      list.append(el("dt", "", key), el("dd", "", value));
    }
    return list;
  }

  async function runPage(id) {
    const q = "?run=" + encodeURIComponent(id);
    const [status, table, log] = await Promise.all([
      api("/api/status" + q), api("/api/metrics" + q),
      api("/api/log" + q + "&bytes=" + LOG_BYTES)]);
    const g = status.gpurent || {};
    const words = g.words || {};
    stamp.textContent = words.seen || "";
    const back = el("a", "", "← every box and run");
    back.href = "#" + fragment("");
    const top = el("div", "top");
    const name = el("h2", "name run-title", g.name);
    name.id = "run-name";
    top.append(name, badge(g.health || status.state, g.health));
    const column = pick(table, status, id);
    const chooser = el("div", "chooser");
    for (const c of numeric(table)) {
      const button = el("button", c === column ? "on" : "", c.replace(/^metrics\//, ""));
      button.type = "button";
      button.addEventListener("click", () => { chosen[id] = c; refresh(); });
      chooser.append(button);
    }
    const graph = el("section", "card");
    graph.append(el("div", "muted", column ? column + " by epoch (" + table.rows.length +
                    " rows" + (table.truncated ? ", the last ones" : "") + ")" :
                    "no metric history yet"), chooser);
    if (column) graph.append(chart(table, column));
    const tail = el("pre", "log", log.log || "(the log is empty)");
    tail.id = "log";
    main.replaceChildren(back, top, facts(status, words), graph,
                         el("h2", "", "log, last " + Math.round(log.bytes / 1024) + " KB"),
                         tail);
    tail.scrollTop = tail.scrollHeight;
  }

  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const run = params().run;
      if (run) await runPage(run); else await home();
    } catch (e) {
      notice(e.message, "error");
    } finally {
      busy = false;
    }
  }

  function start() {
    token = params().t || "";
    if (!token) {
      stamp.textContent = "no token";
      notice("This page needs the link that gpurent glance printed: it ends in #t=… " +
             "(the token, which never leaves your devices).");
      return;
    }
    refresh();
    if (timer === null) timer = setInterval(refresh, POLL_MS);
  }

  window.addEventListener("hashchange", () => { token = params().t || token; refresh(); });
  start();
})();
