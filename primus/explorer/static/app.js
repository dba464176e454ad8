// Primus explorer: the jobs list and a job's page, drawn from the server's JSON API; charts are inline SVG.
// Every view's state is in the URL hash (#/jobs/<id>?source=a&from=5 ...), so a link shares what it shows.
"use strict";

const POLL_MS = 3000;
const SVG_NS = "http://www.w3.org/2000/svg";
const SOURCE_COLORS = ["#2f62c9", "#e07b28", "#2e9b5f", "#b03fa8", "#c9a227", "#17a2b8", "#d2453b", "#6d5acf"];
const SERVICE_COLORS = {
  master: "#5b6b8c", planner: "#2f62c9", resource_controller: "#b03fa8", data_executor: "#e07b28", trainer: "#2e9b5f",
};
const STATE_COLORS = { done: "#2e9b5f", failed: "#d2453b", superseded: "#9aa1b2" };
const TASK_STATES = ["done", "failed", "superseded", "retried"];
const FILTER_KEYS = ["source", "service", "state", "from", "to"];

let pollTimer = null;
let renderToken = 0;

// --- small helpers -------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmtInt = (n) => (n === null || n === undefined ? "-" : Math.round(n).toLocaleString("en-US"));
const fmtMiB = (b) => (b === null || b === undefined ? "-" : (b / 1048576).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }));
const fmtSec = (s, digits = 3) => (s === null || s === undefined ? "-" : Number(s).toFixed(digits));
const fmtPct = (f) => (f === null || f === undefined ? "-" : (100 * f).toFixed(1) + "%");
const fmtAuc = (a) => (a === null || a === undefined ? "-" : Number(a).toFixed(4));
function fmtDuration(s) {
  if (s === null || s === undefined) return "-";
  if (s < 1) return (s * 1000).toFixed(1) + " ms";
  if (s < 120) return s.toFixed(2) + " s";
  return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}
const sourceColor = (sources, name) => SOURCE_COLORS[Math.max(0, sources.indexOf(name)) % SOURCE_COLORS.length];
const serviceColor = (name) => SERVICE_COLORS[name] || "#7a8294";

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path) {
  let reply;
  try {
    reply = await fetch(path, { headers: { Accept: "application/json" } });
  } catch (err) {
    throw new ApiError(0, `the explorer does not answer (${err.message}): is primus explore still running?`);
  }
  let body = null;
  try { body = await reply.json(); } catch (err) { body = null; }
  if (!reply.ok) throw new ApiError(reply.status, (body && body.error) || `HTTP ${reply.status} from ${path}`);
  return body;
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function parseHash() {
  const hash = location.hash.replace(/^#/, "") || "/jobs";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

function hashFor(parts, params) {
  const query = params.toString();
  return "#/" + parts.map(encodeURIComponent).join("/") + (query ? "?" + query : "");
}

function navigate(parts, params) {
  const target = hashFor(parts, params);
  if (location.hash !== target) location.hash = target;
  else route();
}

function withParam(params, key, value) {
  const next = new URLSearchParams(params);
  if (value === null || value === undefined || value === "" || (Array.isArray(value) && !value.length)) next.delete(key);
  else next.set(key, Array.isArray(value) ? value.join(",") : String(value));
  return next;
}

function listParam(params, key) {
  return (params.get(key) || "").split(",").map((v) => v.trim()).filter(Boolean);
}

function filterQuery(params) {
  const out = new URLSearchParams();
  for (const key of FILTER_KEYS) if (params.get(key)) out.set(key, params.get(key));
  return out;
}

function setPolling(on, job) {
  clearTimeout(pollTimer);
  document.getElementById("live").hidden = !on;
  if (!on) return;
  pollTimer = setTimeout(async () => {
    try {
      const fresh = job ? await api(`/api/jobs/${encodeURIComponent(job.id)}`) : null;
      if (!job || fresh.version !== job.version) route({ keepScroll: true });
      else setPolling(fresh.live, job);
    } catch (err) {
      setPolling(true, job);
    }
  }, POLL_MS);
}

// --- the router ----------------------------------------------------------------------------------

async function route(options = {}) {
  const token = ++renderToken;
  const scroll = options.keepScroll ? window.scrollY : 0;
  const { parts, params } = parseHash();
  const app = document.getElementById("app");
  const crumbs = document.getElementById("crumbs");
  crumbs.replaceChildren(el("a", { href: "#/jobs" }, "jobs"));
  showError("");
  try {
    if (parts[0] === "jobs" && parts.length === 2) {
      crumbs.append(el("span", {}, "/ " + parts[1]));
      await renderJob(app, parts[1], params, token);
    } else if (parts.length === 0 || (parts[0] === "jobs" && parts.length === 1)) {
      await renderJobs(app, params, token);
    } else {
      app.replaceChildren(el("p", {}, "no such page: ", el("a", { href: "#/jobs" }, "see the jobs")));
    }
  } catch (err) {
    if (token !== renderToken) return;
    setPolling(false);
    showError(err.message);
    app.replaceChildren(el("p", { class: "muted" }, el("a", { href: "#/jobs" }, "back to the jobs")));
  }
  if (options.keepScroll && token === renderToken) window.scrollTo(0, scroll);
}

// --- the jobs list -------------------------------------------------------------------------------

async function renderJobs(app, params, token) {
  const data = await api("/api/jobs");
  if (token !== renderToken) return;
  const states = [...new Set(data.jobs.map((j) => j.state))].sort();
  const text = el("input", { type: "search", id: "job-filter", placeholder: "filter by id or name", value: params.get("q") || "" });
  const state = el("select", { id: "job-state" }, el("option", { value: "" }, "every state"), states.map((s) => el("option", { value: s }, s)));
  state.value = params.get("state") || "";
  const tbody = el("tbody");
  const count = el("span", { class: "muted" });
  const draw = () => {
    const q = text.value.trim().toLowerCase();
    const wanted = state.value;
    const rows = data.jobs.filter((j) => (!q || j.job_id.toLowerCase().includes(q) || (j.name || "").toLowerCase().includes(q)) && (!wanted || j.state === wanted));
    tbody.replaceChildren(...rows.map((j) => el("tr", { dataset: { job: j.job_id } },
      el("td", { class: "text" }, el("a", { href: hashFor(["jobs", j.job_id], new URLSearchParams()) }, j.job_id)),
      el("td", { class: "text" }, j.name || ""),
      el("td", { class: "text" }, el("span", { class: "badge " + j.state }, j.state), j.live ? " live" : ""),
      el("td", {}, fmtDuration(j.duration_s)),
      el("td", {}, fmtInt(j.samples)),
      el("td", {}, fmtAuc(j.auc)),
      el("td", {}, fmtMiB(j.bytes_read)),
      el("td", {}, fmtSec(j.cpu_seconds)),
      el("td", {}, fmtInt(j.trace_files)),
      el("td", { class: "text" }, j.has_report ? "yes" : el("span", { class: "muted" }, "no report")),
    )));
    count.textContent = `${rows.length} of ${data.jobs.length} jobs under ${data.runs_dir}`;
    const next = withParam(withParam(new URLSearchParams(), "q", text.value.trim()), "state", state.value);
    history.replaceState(null, "", hashFor(["jobs"], next));
  };
  text.addEventListener("input", draw);
  state.addEventListener("change", draw);
  const head = ["job", "name", "state", "duration", "samples", "AUC", "MiB read", "CPU s", "trace files", "report"];
  app.replaceChildren(el("section", {},
    el("h2", {}, "Jobs"),
    el("div", { class: "filters" }, text, state, count),
    data.jobs.length ? el("div", { class: "scroll" }, el("table", { id: "jobs" },
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { class: i < 3 || i === 9 ? "text" : null }, h)))), tbody))
      : el("p", { class: "muted" }, `no runs under ${data.runs_dir} yet: run a job (primus run JOB.yaml), or send spans to /v1/traces`),
  ));
  draw();
  setPolling(data.jobs.some((j) => j.live), null);
}

// --- a job's page --------------------------------------------------------------------------------

async function renderJob(app, id, params, token) {
  const job = await api(`/api/jobs/${encodeURIComponent(id)}`);
  if (token !== renderToken) return;
  job.id = id;
  const base = `/api/jobs/${encodeURIComponent(id)}`;
  const filters = filterQuery(params);
  const q = (extra) => {
    const query = new URLSearchParams(filters);
    for (const [k, v] of Object.entries(extra || {})) if (v !== null && v !== undefined && v !== "") query.set(k, v);
    const text = query.toString();
    return text ? "?" + text : "";
  };
  const sections = {
    cost: el("section", { id: "cost" }, el("h2", {}, "Cost per data source"), el("p", { class: "muted" }, "loading ...")),
    timeline: el("section", { id: "timeline-section" }, el("h2", {}, "Useful samples per second, by source"), el("p", { class: "muted" }, "loading ...")),
    services: el("section", { id: "services" }, el("h2", {}, "Cost per service"), el("p", { class: "muted" }, "loading ...")),
    tasks: el("section", { id: "tasks-section" }, el("h2", {}, "Tasks"), el("p", { class: "muted" }, "loading ...")),
    graph: el("section", { id: "graph-section" }, el("h2", {}, "Data task graph"), el("p", { class: "muted" }, "loading ...")),
    waterfall: el("section", { id: "waterfall-section" }, el("h2", {}, "Trace waterfall"), el("p", { class: "muted" }, "loading ...")),
  };
  app.replaceChildren(
    jobHeader(job),
    filterBar(job, params, id),
    sections.cost,
    el("div", { class: "row2" }, sections.timeline, sections.services),
    sections.tasks,
    sections.graph,
    sections.waterfall,
  );
  const fail = (section, title) => (err) => {
    if (token !== renderToken) return;
    section.replaceChildren(el("h2", {}, title), el("div", { class: "error-inline problems", role: "alert" }, err.message));
  };
  const jobs = [
    api(base + "/cost" + q()).then((cost) => token === renderToken && drawCost(sections.cost, sections.services, cost, job)).catch((err) => {
      fail(sections.cost, "Cost per data source")(err);
      fail(sections.services, "Cost per service")(err);
    }),
    api(base + "/timeline" + q({ buckets: 80 })).then((t) => token === renderToken && drawTimeline(sections.timeline, t, job)).catch(fail(sections.timeline, "Useful samples per second, by source")),
    api(base + "/tasks" + q({ page: params.get("page"), size: 25, sort: params.get("sort") })).then((t) => token === renderToken && drawTasks(sections.tasks, t, id, params)).catch(fail(sections.tasks, "Tasks")),
    api(base + "/graph" + q({ slot_offset: params.get("slot"), slots: 48 })).then((g) => token === renderToken && drawGraph(sections.graph, g, job, id, params)).catch(fail(sections.graph, "Data task graph")),
    drawWaterfall(sections.waterfall, base, q, job, id, params, token).catch(fail(sections.waterfall, "Trace waterfall")),
  ];
  await Promise.all(jobs);
  if (token === renderToken) setPolling(job.live, job);
}

function jobHeader(job) {
  const figure = (label, value) => el("div", {}, el("b", {}, value), el("span", {}, label));
  return el("section", { id: "job-header" },
    el("h1", {}, job.job_id, " ", el("span", { class: "badge " + job.state, id: "job-state-badge" }, job.state)),
    job.message ? el("p", { class: "muted" }, job.message) : null,
    el("div", { class: "figures" },
      figure("duration", fmtDuration(job.duration_s !== undefined && job.duration_s !== null ? job.duration_s : job.span_seconds)),
      figure("samples trained", fmtInt(job.samples)),
      figure("AUC", fmtAuc(job.auc)),
      figure("MiB read", fmtMiB(job.bytes_read)),
      figure("CPU s", fmtSec(job.cpu_seconds)),
      figure("tasks", fmtInt(job.tasks)),
      figure("spans", fmtInt(job.spans)),
      figure("trace files", fmtInt(job.trace_files)),
    ),
    job.problems.length ? el("ul", { class: "problems", id: "problems" }, job.problems.map((p) => el("li", {}, p))) : null,
  );
}

function filterBar(job, params, id) {
  const chosen = { source: listParam(params, "source"), service: listParam(params, "service"), state: listParam(params, "state") };
  const box = (key, value) => el("label", {},
    el("input", {
      type: "checkbox", name: key, value, checked: chosen[key].includes(value),
      onchange: (event) => {
        const values = new Set(listParam(parseHash().params, key));
        if (event.target.checked) values.add(value); else values.delete(value);
        navigate(["jobs", id], withParam(withParam(parseHash().params, key, [...values]), "page", null));
      },
    }), " ", value);
  const number = (key, label) => el("label", {}, label + " ",
    el("input", {
      type: "number", name: key, min: 0, step: "any", value: params.get(key) || "",
      onchange: (event) => navigate(["jobs", id], withParam(withParam(parseHash().params, key, event.target.value), "page", null)),
    }));
  const any = FILTER_KEYS.some((k) => params.get(k));
  return el("section", { class: "filters", id: "filters" },
    el("fieldset", {}, el("legend", {}, "source"), job.sources.length ? job.sources.map((s) => box("source", s)) : el("span", { class: "muted" }, "none")),
    el("fieldset", {}, el("legend", {}, "service"), job.services.map((s) => box("service", s))),
    el("fieldset", {}, el("legend", {}, "task state"), TASK_STATES.map((s) => box("state", s))),
    el("fieldset", {}, el("legend", {}, `time window, s since the first span (of ${fmtSec(job.span_seconds, 1)} s)`), number("from", "from"), number("to", "to")),
    el("div", { class: "actions" },
      el("button", { type: "button", id: "clear-filters", disabled: !any, onclick: () => {
        let next = parseHash().params;
        for (const key of [...FILTER_KEYS, "page", "wf", "slot"]) next = withParam(next, key, null);
        navigate(["jobs", id], next);
      } }, "clear filters"),
      el("div", { class: "note" }, "filters are in the URL: copy it to share this view")),
  );
}

// --- cost ----------------------------------------------------------------------------------------

function drawCost(section, servicesSection, cost, job) {
  // [header, cell, class, the counter it shows]: a counter's column is titled with its description (primus.records.counters).
  const cols = [
    ["source", (r) => r.source, "text"], ["samples", (r) => fmtInt(r.samples), null, "samples"], ["MiB read", (r) => fmtMiB(r.bytes_read), null, "bytes_read"],
    ["CPU s", (r) => fmtSec(r.cpu_seconds), null, "cpu_seconds"], ["retries", (r) => fmtInt(r.retries), null, "retries"],
    ["wasted samples", (r) => fmtInt(r.wasted_samples), null, "wasted_samples"], ["wasted MiB", (r) => fmtMiB(r.wasted_bytes), null, "wasted_bytes"],
    ["wasted CPU s", (r) => fmtSec(r.wasted_cpu_seconds), null, "wasted_cpu_seconds"],
    ["share MiB", (r) => fmtPct(r.share_bytes)], ["share CPU", (r) => fmtPct(r.share_cpu)],
    ["traced", (r) => (r.consistent === null ? "-" : el("span", { class: "badge " + (r.consistent ? "yes" : "no"), title: `spans: ${fmtMiB(r.traced_bytes)} MiB, ${fmtSec(r.traced_cpu_seconds)} CPU s` }, r.consistent ? "agrees" : "differs"))],
  ];
  const described = Object.fromEntries(cost.counters.map((c) => [c.name, c.description]));
  const data = (r) => ({
    source: r.source, samples: r.samples, bytes: r.bytes_read, cpu: r.cpu_seconds, retries: r.retries,
    wastedSamples: r.wasted_samples, wastedBytes: r.wasted_bytes, wastedCpu: r.wasted_cpu_seconds,
  });
  const row = (r, attrs) => el("tr", Object.assign({ dataset: data(r) }, attrs || {}), cols.map(([, f, cls]) => el("td", { class: cls || null }, f(r))));
  section.replaceChildren(
    el("h2", {}, "Cost per data source"),
    el("div", { class: "scroll" }, el("table", { id: "cost-sources", dataset: { basis: cost.basis } },
      el("thead", {}, el("tr", {}, cols.map(([h, , cls, counter]) => el("th", { class: cls || null, title: described[counter] || null }, h)))),
      el("tbody", {}, cost.sources.map((r) => row(r))),
      el("tfoot", {}, row(cost.totals, { id: "cost-total" })),
    )),
    el("p", { class: "note", id: "cost-basis" }, `${cost.basis === "report" ? "from report.json" : "from the spans"}: ${cost.note}; shares are of the whole job`),
    cost.basis === "report" ? everyCounter(cost) : null,
    stackedBars(cost, job),
  );
  const scols = ["service", "spans", "CPU s in spans", "errors", "s in spans", "processes"];
  servicesSection.replaceChildren(
    el("h2", {}, "Cost per service"),
    el("table", { id: "cost-services" },
      el("thead", {}, el("tr", {}, scols.map((h, i) => el("th", { class: i ? null : "text" }, h)))),
      el("tbody", {}, cost.services.map((s) => el("tr", { dataset: { service: s.service } },
        el("td", { class: "text" }, el("i", { style: `display:inline-block;width:10px;height:10px;margin-right:5px;background:${serviceColor(s.service)}` }), s.service),
        el("td", {}, fmtInt(s.spans)), el("td", {}, fmtSec(s.cpu_seconds)), el("td", {}, fmtInt(s.errors)),
        el("td", {}, fmtSec(s.span_seconds, 2)), el("td", {}, fmtInt(s.processes)))))),
    el("p", { class: "note" }, "CPU seconds the spans of each service report (primus.cpu_seconds): a transform's CPU is inside its read's."),
  );
}

function everyCounter(cost) {
  // Every counter of the ledger, as primus.records.counters declares it, per source: one the table above leaves out shows here.
  const rows = [...cost.sources, cost.totals];
  return el("details", { id: "cost-counters" }, el("summary", {}, `every counter of the ledger (${cost.counters.length})`),
    el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, el("th", { class: "text" }, "counter"), rows.map((r) => el("th", {}, r.source)), el("th", { class: "text" }, "what it counts"))),
      el("tbody", {}, cost.counters.map((c) => el("tr", { dataset: { counter: c.name } },
        el("td", { class: "text" }, c.name), rows.map((r) => el("td", {}, c.real ? fmtSec(r[c.name]) : fmtInt(r[c.name]))),
        el("td", { class: "text note" }, c.description + (c.waste ? " (waste)" : ""))))))));
}

function stackedBars(cost, job) {
  // One bar per measure, stacked by source: how the job's bytes, CPU and samples split between its sources.
  const measures = [["MiB read", "bytes_read", fmtMiB], ["CPU s", "cpu_seconds", fmtSec], ["useful samples", "samples", fmtInt],
    ["wasted CPU s", "wasted_cpu_seconds", fmtSec]];
  const width = 560, left = 110, barH = 22, gap = 12, right = 90;
  const height = measures.length * (barH + gap) + 4;
  const chart = svg("svg", { id: "cost-chart", width: "100%", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "cost per source, stacked" });
  measures.forEach(([label, key, fmt], i) => {
    const y = i * (barH + gap) + 2;
    const total = cost.sources.reduce((sum, r) => sum + (r[key] || 0), 0);
    chart.append(svg("text", { x: 0, y: y + barH / 2 + 4 }, label));
    chart.append(svg("rect", { x: left, y, width: width - left - right, height: barH, fill: "#f0f1f5" }));
    let x = left;
    for (const r of cost.sources) {
      const w = total ? ((r[key] || 0) / total) * (width - left - right) : 0;
      if (w <= 0) continue;
      chart.append(svg("rect", { x, y, width: w, height: barH, fill: sourceColor(job.sources, r.source), class: "bar", "data-source": r.source },
        svg("title", {}, `${r.source}: ${fmt(r[key])} ${label} (${fmtPct(total ? r[key] / total : 0)})`)));
      x += w;
    }
    chart.append(svg("text", { x: width - right + 6, y: y + barH / 2 + 4 }, fmt(total)));
  });
  return el("div", { class: "chart" }, chart, legend(cost.sources.map((r) => r.source), (name) => sourceColor(job.sources, name)));
}

function legend(names, color) {
  return el("div", { class: "legend" }, names.map((n) => el("span", {}, el("i", { style: `background:${color(n)}` }), n)));
}

// --- timeline ------------------------------------------------------------------------------------

function drawTimeline(section, t, job) {
  const width = 560, height = 190, left = 50, bottom = 22, top = 8, right = 10;
  const n = t.series.length ? t.series[0].rates.length : 0;
  const max = Math.max(1, ...t.series.flatMap((s) => s.rates));
  const x = (i) => left + (i / Math.max(1, n)) * (width - left - right);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const chart = svg("svg", { id: "timeline", width: "100%", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "samples per second by source" });
  chart.append(svg("line", { class: "axis", x1: left, y1: y(0), x2: width - right, y2: y(0) }));
  chart.append(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: y(0) }));
  chart.append(svg("text", { x: 0, y: top + 10 }, fmtInt(max)));
  chart.append(svg("text", { x: 0, y: y(0) }, "0/s"));
  const span = n * t.bucket_s;
  for (let k = 0; k <= 4; k++) {
    chart.append(svg("text", { x: x((k / 4) * n) - 8, y: height - 6 }, fmtSec(t.start_s + (k / 4) * span, 1) + "s"));
  }
  for (const s of t.series) {
    const points = s.rates.map((v, i) => `${x(i + 0.5).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points, fill: "none", stroke: sourceColor(job.sources, s.source), "stroke-width": 1.6, "data-source": s.source },
      svg("title", {}, `${s.source}: ${fmtInt(s.samples)} samples in the window`)));
  }
  section.replaceChildren(el("h2", {}, "Useful samples per second, by source"), chart,
    legend(t.series.map((s) => s.source), (name) => sourceColor(job.sources, name)),
    el("p", { class: "note" }, `rows of the reads that were served, spread over each read; buckets of ${fmtSec(t.bucket_s, 2)} s`));
}

// --- tasks ---------------------------------------------------------------------------------------

function pager(page, onGo, id) {
  return el("div", { class: "pager", id },
    el("button", { type: "button", disabled: page.page <= 1, onclick: () => onGo(page.page - 1), class: "prev" }, "previous"),
    el("span", {}, `page ${page.page} of ${page.pages} (${fmtInt(page.total)} in all)`),
    el("button", { type: "button", disabled: page.page >= page.pages, onclick: () => onGo(page.page + 1), class: "next" }, "next"));
}

function drawTasks(section, data, id, params) {
  const page = data.page;
  const sort = el("select", { id: "task-sort", onchange: (e) => navigate(["jobs", id], withParam(withParam(parseHash().params, "sort", e.target.value === "start" ? "" : e.target.value), "page", null)) },
    ["start", "source", "slot", "duration", "attempts", "bytes", "cpu", "wasted"].map((s) => el("option", { value: s }, "sort by " + s)));
  sort.value = data.sort;
  const head = ["task", "source", "slot", "state", "attempts", "retries", "samples", "MiB read", "CPU s", "wasted samples", "wasted CPU s", "start s", "duration", "executors"];
  section.replaceChildren(
    el("h2", {}, "Tasks"),
    el("div", { class: "pager" }, sort, el("span", { class: "muted" }, Object.entries(data.states).map(([s, n]) => `${n} ${s}`).join(", "))),
    el("div", { class: "scroll" }, el("table", { id: "tasks" },
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { class: i < 4 || i === 13 ? "text" : null }, h)))),
      el("tbody", {}, page.items.map((t) => el("tr", { dataset: { task: t.task_id, source: t.source, state: t.state } },
        el("td", { class: "text" }, t.task_id), el("td", { class: "text" }, t.source), el("td", { class: "text" }, t.slot),
        el("td", { class: "text" }, el("span", { class: "badge " + t.state }, t.state)),
        el("td", {}, t.attempts), el("td", {}, t.retries), el("td", {}, fmtInt(t.samples)), el("td", {}, fmtMiB(t.bytes_read)),
        el("td", {}, fmtSec(t.cpu_seconds)), el("td", {}, fmtInt(t.wasted_samples)), el("td", {}, fmtSec(t.wasted_cpu_seconds)),
        el("td", {}, fmtSec(t.start_s, 2)), el("td", {}, fmtDuration(t.duration_s)), el("td", { class: "text" }, t.executors.join(", "))))),
    )),
    pager(page, (n) => navigate(["jobs", id], withParam(parseHash().params, "page", n > 1 ? n : null)), "tasks-pager"),
  );
}

// --- task graph ----------------------------------------------------------------------------------

function drawGraph(section, g, job, id, params) {
  const cellW = 16, cellH = 14, left = 110, top = 62;
  const rowsOf = {};
  for (const c of g.cells) {
    const key = c.source + "\u0000" + c.slot;
    rowsOf[key] = (rowsOf[key] || 0) + 1;
  }
  const lanes = {};
  for (const s of g.sources) lanes[s] = Math.max(1, ...g.slots.map((slot) => rowsOf[s + "\u0000" + slot] || 0));
  const rowTop = {};
  let y = top;
  for (const s of g.sources) { rowTop[s] = y; y += lanes[s] * cellH + 8; }
  const width = left + g.slots.length * cellW + 20;
  const height = y + 8;
  const chart = svg("svg", { id: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "data tasks by source and slot" });
  chart.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 6 6", refX: 6, refY: 3, markerWidth: 6, markerHeight: 6, orient: "auto" },
    svg("path", { d: "M0,0 L6,3 L0,6 z", fill: "#6d7aa0" }))));
  g.slots.forEach((slot, i) => {
    if (i % 6 === 0) {
      const x = left + i * cellW + 4, y = top - 6;
      chart.append(svg("text", { x, y, transform: `rotate(-35 ${x} ${y})` }, slot.replace(/^\d{4}-/, "")));
      chart.append(svg("line", { class: "axis", x1: x - 4, y1: top - 4, x2: x - 4, y2: top - 1 }));
    }
  });
  for (const s of g.sources) chart.append(svg("text", { x: 0, y: rowTop[s] + cellH - 3 }, s));
  const placed = {};
  const used = {};
  const detail = el("div", { class: "detail", id: "task-detail", hidden: true });
  for (const c of g.cells) {
    const col = g.slots.indexOf(c.slot);
    const key = c.source + "\u0000" + c.slot;
    const lane = used[key] || 0;
    used[key] = lane + 1;
    const cx = left + col * cellW, cy = rowTop[c.source] + lane * cellH;
    placed[c.task_id] = [cx + (cellW - 3) / 2, cy + (cellH - 3) / 2];
    chart.append(svg("rect", {
      x: cx, y: cy, width: cellW - 3, height: cellH - 3, rx: 2, fill: STATE_COLORS[c.state] || "#9aa1b2",
      class: "cell" + (c.retries > 0 ? " retried" : ""), "data-task": c.task_id, "data-state": c.state,
      onclick: () => showTask(detail, id, c),
    }, svg("title", {}, `${c.task_id}\n${c.source} ${c.slot}: ${c.state}, ${c.attempts} attempt(s), ${fmtDuration(c.duration_s)}\non ${c.executors.join(", ")}`)));
  }
  for (const [a, b] of g.edges) {
    if (!placed[a] || !placed[b]) continue;
    const [x1, y1] = placed[a], [x2, y2] = placed[b];
    const mx = (x1 + x2) / 2;
    chart.append(svg("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
  }
  const offset = g.slot_offset, perPage = 48;
  const pages = { page: Math.floor(offset / perPage) + 1, pages: Math.max(1, Math.ceil(g.total_slots / perPage)), total: g.total_slots };
  const depNote = g.dependencies === "spec"
    ? (g.edges.length ? `${g.edges.length} dependencies on this page: a stream's tasks run in time order, a source with "after" waits for those sources' tasks of its slot` : "no dependencies among these tasks: the job's batch sources are read in any order")
    : "dependencies unknown: the job's spec is not in the master's job store (runs/primus.db)";
  section.replaceChildren(
    el("h2", {}, "Data task graph"),
    el("p", { class: "note" }, `tasks by source and time slot (slots ${offset + 1} to ${offset + g.slots.length} of ${g.total_slots}); an orange edge: retried; click a task for its attempts. ${depNote}`),
    legend(Object.keys(STATE_COLORS), (s) => STATE_COLORS[s]),
    el("div", { class: "graph-wrap" }, chart),
    pager(pages, (n) => navigate(["jobs", id], withParam(parseHash().params, "slot", n > 1 ? (n - 1) * perPage : null)), "graph-pager"),
    detail,
  );
}

function showTask(detail, id, cell) {
  detail.hidden = false;
  detail.replaceChildren(el("p", { class: "muted" }, "loading ..."));
  api(`/api/jobs/${encodeURIComponent(id)}/tasks?${new URLSearchParams({ sort: "start", size: 1000, page: 1, source: cell.source })}`)
    .then((data) => {
      const task = data.page.items.find((t) => t.task_id === cell.task_id);
      if (!task) { detail.replaceChildren(el("p", {}, `task ${cell.task_id}: not on the first 1,000 of its source`)); return; }
      detail.replaceChildren(
        el("h3", {}, task.task_id, " ", el("span", { class: "badge " + task.state }, task.state)),
        el("p", {}, `${task.source} / ${task.slot} (partition ${task.partition}): ${fmtInt(task.samples)} samples, ${fmtMiB(task.bytes_read)} MiB, ${fmtSec(task.cpu_seconds)} CPU s`),
        el("table", {}, el("thead", {}, el("tr", {}, ["attempt", "state", "executor", "speculative", "start s", "duration", "rows", "CPU s"].map((h, i) => el("th", { class: i < 3 ? "text" : null }, h)))),
          el("tbody", {}, task.attempt_list.map((a) => el("tr", {},
            el("td", { class: "text" }, a.attempt), el("td", { class: "text" }, a.state), el("td", { class: "text" }, a.executor),
            el("td", {}, a.speculative ? "yes" : "no"), el("td", {}, fmtSec(a.start_s, 3)), el("td", {}, fmtDuration(a.duration_s)),
            el("td", {}, fmtInt(a.rows)), el("td", {}, fmtSec(a.cpu_seconds)))))),
      );
    })
    .catch((err) => detail.replaceChildren(el("p", { class: "problems" }, err.message)));
}

// --- waterfall -----------------------------------------------------------------------------------

async function drawWaterfall(section, base, q, job, id, params, token) {
  const WF_PAGE = 200;
  const traces = await api(base + "/traces?size=200");
  if (token !== renderToken) return;
  const chosen = params.get("trace") || (traces.page.items[0] && traces.page.items[0].trace_id);
  const offset = Number(params.get("wf") || 0);
  const wf = await api(base + "/waterfall" + q({ trace: chosen, offset, limit: WF_PAGE }));
  if (token !== renderToken) return;
  const select = el("select", { id: "trace-select", onchange: (e) => navigate(["jobs", id], withParam(withParam(parseHash().params, "trace", e.target.value), "wf", null)) },
    traces.page.items.map((t) => el("option", { value: t.trace_id }, `${t.trace_id.slice(0, 12)}: ${fmtInt(t.spans)} spans, ${t.services.length} services, ${t.root}`)));
  select.value = wf.trace_id;
  const detail = el("div", { class: "detail", id: "span-detail", hidden: true });
  const total = Math.max(wf.duration_s, 1e-9);
  const rows = el("div", { class: "waterfall", id: "waterfall" });
  for (const r of wf.rows) {
    const leftPct = (100 * r.start_s) / total, widthPct = Math.max((100 * r.duration_s) / total, 0.05);
    const row = el("div", {
      class: "wf-row" + (params.get("span") === r.span_id ? " selected" : ""), dataset: { span: r.span_id, service: r.service },
      onclick: () => {
        for (const other of rows.querySelectorAll(".wf-row.selected")) other.classList.remove("selected");
        row.classList.add("selected");
        history.replaceState(null, "", hashFor(["jobs", id], withParam(parseHash().params, "span", r.span_id)));
        showSpan(detail, base, r.span_id);
      },
    },
      el("div", { class: "wf-name", style: `padding-left:${4 + Math.min(r.depth, 30) * 12}px`, title: `${r.service}: ${r.name}` },
        r.status === 2 ? el("span", { class: "err" }, "! ") : null, r.name, " ", el("span", { class: "svc" }, r.process),
        r.children ? el("span", { class: "svc" }, ` (${r.children})`) : null, r.events ? el("span", { class: "svc" }, ` [${r.events} event${r.events > 1 ? "s" : ""}]`) : null),
      el("div", { class: "wf-bar" },
        el("span", { style: `left:${leftPct}%;width:${widthPct}%;background:${serviceColor(r.service)}` }),
        el("em", { style: durationLabel(leftPct, widthPct) }, fmtDuration(r.duration_s))),
    );
    rows.append(row);
  }
  const page = { page: Math.floor(offset / WF_PAGE) + 1, pages: Math.max(1, Math.ceil(wf.total / WF_PAGE)), total: wf.total };
  section.replaceChildren(
    el("h2", {}, "Trace waterfall"),
    el("div", { class: "pager" }, select, el("span", { class: "muted", id: "waterfall-services" }, `${wf.services.length} services: ${wf.services.join(", ")}; ${fmtDuration(wf.duration_s)}`)),
    legend(wf.services, serviceColor),
    rows,
    pager(page, (n) => navigate(["jobs", id], withParam(parseHash().params, "wf", n > 1 ? (n - 1) * WF_PAGE : null)), "waterfall-pager"),
    detail,
  );
  if (params.get("span")) showSpan(detail, base, params.get("span"));
}

function durationLabel(leftPct, widthPct) {
  // Right of the bar; left of it near the right edge; inside its end when the bar is wide and ends near the edge.
  if (leftPct + widthPct > 85 && widthPct > 12) return `right:${Math.max(0, 100 - leftPct - widthPct) + 0.5}%;color:#fff`;
  if (leftPct > 70) return `right:${100 - leftPct + 0.5}%`;
  return `left:${Math.min(leftPct + widthPct + 0.5, 99)}%`;
}

function showSpan(detail, base, spanId) {
  detail.hidden = false;
  detail.replaceChildren(el("p", { class: "muted" }, "loading ..."));
  api(`${base}/spans/${encodeURIComponent(spanId)}`).then((s) => {
    const kv = (k, v) => el("tr", {}, el("td", { class: "key" }, k), el("td", { class: "val" }, typeof v === "object" ? JSON.stringify(v) : String(v)));
    detail.replaceChildren(
      el("h3", {}, `${s.service}: ${s.name}`),
      el("table", { id: "span-attributes" }, el("tbody", {},
        kv("span", s.span_id), kv("trace", s.trace_id), kv("parent", s.parent_id ? `${s.parent_id} (${s.parent_name || "not in the run"})` : "none (a root)"),
        kv("process", s.process), kv("start, s since the first span", fmtSec(s.start_s, 6)), kv("duration", fmtDuration(s.duration_s)),
        kv("status", s.status === 2 ? `error: ${s.status_message}` : s.status === 1 ? "ok" : "unset"),
        Object.entries(s.attributes).map(([k, v]) => kv(k, v)))),
      el("h3", {}, `events (${s.events.length})`),
      s.events.length ? el("table", { id: "span-events" }, el("tbody", {}, s.events.map((e) => kv(`${e.name} at +${fmtSec(e.offset_s, 6)} s`, e.attributes)))) : el("p", { class: "muted" }, "none"),
    );
  }).catch((err) => detail.replaceChildren(el("p", { class: "problems" }, err.message)));
}

window.addEventListener("hashchange", () => route());
window.addEventListener("DOMContentLoaded", () => route());
