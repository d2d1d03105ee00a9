// kueuelog web view: plain DOM, no framework, no build step. Live updates over Server-Sent Events.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k.startsWith("data-")) node.setAttribute(k, v); else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};
const wlLink = (key, text) => el("a", { href: `#/workload/${key}` }, text || key);
const COLORS = ["#0969da", "#bf3989", "#1a7f37", "#9a6700", "#8250df", "#cf222e", "#1b7c83", "#57606a"];

let lastSeq = 0;
let overview = null;

function renderOverview(doc) {
  overview = doc;
  $("#clock").textContent = `${doc.time} · cycle ${doc.cycles}`;
  const w = doc.workloads;
  $("#counts").textContent = `${w.pending} pending · ${w.admitted} admitted · ${w.finished} finished`;
  const cohorts = $("#cohorts");
  cohorts.replaceChildren(...doc.cohorts.map((root) => el("div", { class: "tree" }, el("ul", {}, treeNode(root)))));
  const cqBody = $("#cluster-queues tbody");
  cqBody.replaceChildren();
  for (const cq of doc.clusterQueues) {
    const rows = cq.resources.length ? cq.resources : [null];
    rows.forEach((r, i) => {
      const tr = el("tr", { "data-cq": cq.name });
      if (i === 0) {
        const span = { rowSpan: rows.length };
        tr.append(el("td", span, el("a", { href: `#/workloads?clusterQueue=${cq.name}` }, cq.name)),
          el("td", span, cq.cohort), el("td", { ...span, class: "num pending" }, cq.pending),
          el("td", { ...span, class: "num admitted" }, cq.admitted));
      }
      if (r) {
        const share = r.nominal.value ? Math.min(r.used.value / r.nominal.value, 2) : 0;
        const bar = el("span", { class: "bar" + (r.borrowed.value > 0 ? " over" : "") });
        bar.style.width = `${Math.round(share * 40)}px`;
        tr.append(el("td", {}, `${r.flavor} / ${r.resource}`), el("td", { class: "num" }, r.nominal.text),
          el("td", { class: "num" }, r.used.text, " ", bar),
          el("td", { class: "num" + (r.borrowed.value > 0 ? " borrowing" : "") }, r.borrowed.text),
          el("td", { class: "num" }, r.lendable.text));
      }
      cqBody.append(tr);
    });
  }
  $("#local-queues tbody").replaceChildren(...doc.localQueues.map((lq) => el("tr", { "data-lq": `${lq.namespace}/${lq.name}` },
    el("td", {}, el("a", { href: `#/workloads?localQueue=${lq.namespace}/${lq.name}` }, `${lq.namespace}/${lq.name}`)),
    el("td", {}, lq.clusterQueue), el("td", { class: "num" }, lq.pending), el("td", { class: "num" }, lq.admitted))));
  const workers = doc.workerClusters || [];
  $("#workers-section").hidden = workers.length === 0;
  $("#worker-clusters tbody").replaceChildren(...workers.map((w) => el("tr", { "data-worker": w.name },
    el("td", {}, w.name), el("td", {}, w.active ? "yes" : "lost"), el("td", { class: "num running" }, w.running),
    el("td", { class: "num placed" }, w.placed), el("td", { class: "num" }, w.finished),
    el("td", { class: "num" }, w.clusterQueues))));
  const select = $("#filters select[name=clusterQueue]");
  if (select.options.length === 1) {
    for (const cq of doc.clusterQueues) select.append(el("option", { value: cq.name }, cq.name));
  }
}

function treeNode(node) {
  const used = node.resources.filter((r) => r.used.value > 0).map((r) => `${r.flavor}/${r.resource} ${r.used.text} of ${r.subtree.text}`);
  const label = el("span", { class: "node " + (node.kind === "Cohort" ? "cohort" : "cq") },
    `${node.kind} ${node.name}`, used.length ? ` — ${used.join(", ")}` : "");
  const li = el("li", {}, label);
  if (node.children.length) li.append(el("ul", {}, ...node.children.map(treeNode)));
  return li;
}

function addDecisions(items) {
  const list = $("#decisions");
  for (const d of items) {
    if (d.seq <= lastSeq) continue;
    lastSeq = d.seq;
    list.prepend(el("li", { class: d.type }, `${d.time} cycle ${d.cycle} `, wlLink(d.key), `: ${d.text}`));
  }
  while (list.children.length > 200) list.lastChild.remove();
}

function connect() {
  const source = new EventSource(`/api/stream?after=${lastSeq}`);
  source.addEventListener("open", () => { $("#live").className = "on"; $("#live").textContent = "live"; });
  source.addEventListener("error", () => { $("#live").className = "off"; $("#live").textContent = "reconnecting"; });
  source.addEventListener("update", (ev) => {
    const doc = JSON.parse(ev.data);
    renderOverview(doc.overview);
    addDecisions(doc.decisions);
    if (location.hash.startsWith("#/usage")) loadUsage();
  });
}

async function getJSON(url) {
  const res = await fetch(url);
  return [res.status, await res.json()];
}

async function loadWorkloads(params) {
  const form = $("#filters");
  for (const [k, v] of params) if (form.elements[k]) form.elements[k].value = v;
  const [, doc] = await getJSON(`/api/workloads?${params}`);
  $("#workload-total").textContent = `(${doc.total})`;
  $("#workloads tbody").replaceChildren(...doc.items.map((w) => el("tr", { "data-key": w.key, class: w.status },
    el("td", {}, wlLink(w.key, w.name)), el("td", {}, w.status), el("td", {}, w.localQueue), el("td", {}, w.clusterQueue),
    el("td", { class: "num" }, w.priority), el("td", {}, w.flavors), el("td", {}, w.reason))));
}

async function loadWorkload(key) {
  $("#workload-title").textContent = key;
  $("#workload-answer").textContent = "…";
  const [status, doc] = await getJSON(`/api/workloads/${key}`);
  if (status !== 200) { $("#workload-answer").textContent = `no Workload ${key} in the log`; $("#timeline").replaceChildren(); return; }
  $("#workload-answer").textContent = doc.answer.summary;
  $("#timeline").replaceChildren(...doc.timeline.map((e) => {
    const where = e.inputOffset !== null ? `input ${e.inputOffset}` :
      e.count > 1 ? `cycles ${e.cycle}-${e.lastCycle} (${e.count} times)` : `cycle ${e.cycle}`;
    const li = el("li", { class: e.kind }, `${e.time} ${where}: ${e.text}`);
    if (e.related) li.append(" → ", wlLink(e.related));
    return li;
  }));
}

function plot(title, times, series) {
  const W = 520, H = 160, names = Object.keys(series);
  const max = Math.max(1, ...names.flatMap((n) => series[n]));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "plot"); svg.setAttribute("width", W); svg.setAttribute("height", H + 40);
  const text = document.createElementNS(ns, "text");
  text.setAttribute("x", 8); text.setAttribute("y", 16); text.textContent = `${title} (max ${max})`;
  svg.append(text);
  names.forEach((n, i) => {
    const values = series[n];
    const pts = values.map((v, j) => `${(j / Math.max(1, values.length - 1)) * (W - 20) + 10},${H + 20 - (v / max) * (H - 10)}`);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none");
    line.setAttribute("stroke", COLORS[i % COLORS.length]); line.setAttribute("stroke-width", "1.5");
    svg.append(line);
  });
  const legend = el("div", { class: "legend" }, ...names.map((n, i) => {
    const s = el("span", {}, n); s.style.color = COLORS[i % COLORS.length]; return s;
  }));
  return el("div", { class: "chart" }, svg, legend);
}

async function loadUsage() {
  const [, doc] = await getJSON("/api/usage");
  $("#usage-cq").replaceChildren(...Object.entries(doc.clusterQueues).map(([cq, s]) => plot(cq, doc.times, s)));
  const byResource = {};
  for (const [fr, values] of Object.entries(doc.flavors)) {
    const res = fr.split("/").slice(1).join("/");
    (byResource[res] = byResource[res] || {})[fr] = values;
  }
  $("#usage-flavor").replaceChildren(...Object.entries(byResource).map(([res, s]) => plot(res, doc.times, s)));
}

function route() {
  const hash = location.hash || "#/";
  const [path, query] = hash.slice(1).split("?");
  const show = (id) => document.querySelectorAll(".view").forEach((v) => { v.hidden = v.id !== id; });
  if (path.startsWith("/workload/")) { show("view-workload"); loadWorkload(path.slice("/workload/".length)); }
  else if (path === "/workloads") { show("view-workloads"); loadWorkloads(new URLSearchParams(query || "")); }
  else if (path === "/usage") { show("view-usage"); loadUsage(); }
  else show("view-queues");
}

$("#filters").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const params = new URLSearchParams();
  for (const [k, v] of new FormData(ev.target)) if (v) params.set(k, v);
  location.hash = `#/workloads?${params}`;
});
window.addEventListener("hashchange", route);
getJSON("/api/decisions").then(([, doc]) => addDecisions(doc.items));
route();
connect();
