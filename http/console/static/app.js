// The wts console: a single page over the public API, with the caller's
// API key from this tab's session storage. Routes: #/ (runs and
// sessions), #/runs/ID (a run: curves, operations, sampler, checkpoints,
// artifacts, cost), #/sessions/ID. Pages of live work refresh themselves.

const KEY = "wts-api-key";
const LIVE_RUN = new Set(["created", "running", "finishing", "cancel_requested"]);
const REFRESH_MS = 2000;

// ---- the API ---------------------------------------------------------------

class APIError extends Error {
  constructor(status, code, message, requestID) {
    super(`${code}: ${message}`);
    Object.assign(this, { status, code, requestID });
  }
}

async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY)}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = data.error || {};
    throw new APIError(r.status, e.code || `http_${r.status}`, e.message || r.statusText, data.request_id);
  }
  return data;
}
const get = (path) => call("GET", path);
const T = "/v1/training";

// ---- DOM helpers -------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  return e;
}

function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children.flat()) if (c) e.append(c);
  return e;
}

const link = (href, text) => el("a", { href }, text);
const when = (t) => (t ? new Date(t).toLocaleString() : "");
const status = (s) => el("span", { class: `status ${s}` }, s);
const num = (v, digits = 4) => (typeof v === "number" ? (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : +v.toFixed(digits)) : "");

function table(headers, rows, empty = "none yet") {
  if (!rows.length) return el("p", { class: "empty" }, empty);
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

// ---- charts ------------------------------------------------------------------

// zooms keeps each chart's x range across refreshes, by chart id.
const zooms = new Map();

// chart draws points [{x, y}] as a line in an SVG; drag across it to zoom
// into a range of steps, double-click to see them all again.
function chart(id, title, points) {
  const W = 560, H = 220, L = 56, R = 12, TOP = 12, B = 28;
  const all = [Math.min(...points.map((p) => p.x)), Math.max(...points.map((p) => p.x))];
  let [x0, x1] = zooms.get(id) || all;
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  const shown = points.filter((p) => p.x >= x0 && p.x <= x1);
  const ys = (shown.length ? shown : points).map((p) => p.y);
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => TOP + (1 - (y - y0) / (y1 - y0)) * (H - TOP - B);
  const line = svg("polyline", { class: "line", points: shown.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ") });
  const dots = shown.map((p) => svg("circle", { class: "dot", cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: 2.5 },
    svg("title", {}, document.createTextNode(`step ${p.x}: ${num(p.y, 6)}`))));
  const text = (x, y, s, anchor = "end") => svg("text", { x, y, "text-anchor": anchor }, document.createTextNode(s));
  const brush = svg("rect", { class: "brush", x: 0, y: TOP, width: 0, height: H - TOP - B, visibility: "hidden" });
  const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title, "data-metric": title, "data-points": points.length },
    svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }),
    svg("line", { class: "axis", x1: L, y1: TOP, x2: L, y2: H - B }),
    text(L - 6, TOP + 10, String(num(y1))), text(L - 6, H - B, String(num(y0))),
    text(L, H - 8, `step ${num(x0, 0)}`, "start"), text(W - R, H - 8, `step ${num(x1, 0)}`),
    line, dots, brush);
  // Zoom: a drag across the plot picks the steps to show.
  const stepAt = (ev) => {
    const box = plot.getBoundingClientRect();
    const px = ((ev.clientX - box.left) / box.width) * W;
    return { px: Math.max(L, Math.min(W - R, px)), x: x0 + ((Math.max(L, Math.min(W - R, px)) - L) / (W - L - R)) * (x1 - x0) };
  };
  let from = null;
  plot.addEventListener("mousedown", (ev) => { from = stepAt(ev); brush.setAttribute("visibility", "visible"); ev.preventDefault(); });
  plot.addEventListener("mousemove", (ev) => {
    if (!from) return;
    const to = stepAt(ev);
    brush.setAttribute("x", Math.min(from.px, to.px));
    brush.setAttribute("width", Math.abs(to.px - from.px));
  });
  plot.addEventListener("mouseup", (ev) => {
    if (!from) return;
    const to = stepAt(ev);
    brush.setAttribute("visibility", "hidden");
    if (Math.abs(to.px - from.px) > 4) {
      zooms.set(id, [Math.min(from.x, to.x), Math.max(from.x, to.x)]);
      figure.replaceWith(chart(id, title, points));
    }
    from = null;
  });
  plot.addEventListener("dblclick", () => { zooms.delete(id); figure.replaceWith(chart(id, title, points)); });
  const figure = el("figure", { class: "curve", id: `chart-${title}` }, el("figcaption", {}, title, zooms.has(id) ? el("small", {}, " (zoomed: double-click for all)") : el("small", {}, " (drag to zoom)")), plot);
  return figure;
}

// ---- pages -------------------------------------------------------------------

let timer = null;

// live re-renders a page every REFRESH_MS while it says it is live.
function live(render) {
  const tick = async () => {
    let again = false;
    try { again = await render(); } catch (e) { failed(e); }
    if (again) timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
}

function failed(e) {
  if (e instanceof APIError && e.status === 401) { signOut(); return; }
  show(el("p", { class: "error" }, String(e.message || e)));
}

async function homePage() {
  live(async () => {
    const [runs, sessions] = await Promise.all([get(`${T}/runs?limit=50`), get(`${T}/sessions?limit=50`)]);
    show(
      el("h1", {}, "Runs"),
      table(["run", "status", "model", "rank", "operations", "weights", "created"], runs.items.map((r) =>
        [link(`#/runs/${r.id}`, r.id), status(r.status), r.base_model, r.lora.rank, r.next_seq_id - 1, r.latest_weight_version, when(r.created_at)]), "no runs yet"),
      el("h1", {}, "Sessions"),
      table(["session", "status", "provider", "run", "created"], sessions.items.map((s) =>
        [link(`#/sessions/${s.id}`, s.id), status(s.status), s.provider, s.run_id ? link(`#/runs/${s.run_id}`, s.run_id) : "", when(s.created_at)]), "no sessions yet"));
    return runs.items.some((r) => LIVE_RUN.has(r.status));
  });
}

// metricsCache keeps a run's step records read so far, by run id.
const metricsCache = new Map();

async function metricsOf(runID) {
  const m = metricsCache.get(runID) || { after: 0, items: [] };
  for (;;) {
    const page = await get(`${T}/runs/${runID}/metrics?after_seq=${m.after}&limit=500`);
    m.items.push(...page.items);
    m.after = page.next_after_seq;
    if (page.items.length < 500) break;
  }
  metricsCache.set(runID, m);
  return m.items;
}

// signedLinks keeps the signed links of the artifacts the user asked them
// for, by artifact id.
const signedLinks = new Map();

async function runPage(id) {
  live(async () => {
    const run = await get(`${T}/runs/${id}`);
    const first = Math.max(0, run.next_seq_id - 1 - 100);
    const [records, ops, cps, arts, cost, sampler] = await Promise.all([
      metricsOf(id), get(`${T}/runs/${id}/operations?after_seq=${first}&limit=100`),
      get(`${T}/runs/${id}/checkpoints?limit=500`), get(`${T}/runs/${id}/artifacts?limit=500`),
      get(`${T}/sessions/${run.session_id}/cost`),
      run.sampler_id ? get(`${T}/samplers/${run.sampler_id}`).catch(() => null) : null]);
    const series = new Map();
    for (const r of records) {
      for (const [name, y] of Object.entries(r.metrics)) {
        const key = name === "loss:sum" || name === "tokens:sum" || name === "datums:sum" || name === "step" ? null : name;
        if (key && Number.isFinite(y)) (series.get(key) || series.set(key, []).get(key)).push({ x: r.step, y });
      }
    }
    const order = ["loss:mean", "grad_norm", "learning_rate"];
    const curves = [...series.keys()].sort((a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99))
      .filter((k) => k !== "clipped").map((k) => chart(`${id}/${k}`, k, series.get(k)));
    const artifactRows = arts.items.map((a) => [a.id, a.kind, a.size_bytes, status(a.status), when(a.created_at),
      signedLinks.has(a.id) ? el("span", { class: "files" }, signedLinks.get(a.id).files.map((f) => el("a", { href: f.url, download: f.path.split("/").pop() }, f.path)))
        : a.status === "available" ? el("button", { type: "button", onclick: async () => {
          try {
            signedLinks.set(a.id, await call("POST", `${T}/artifacts/${a.id}/download_urls`, { format: "peft" }));
            route();
          } catch (e) { failed(e); }
        } }, "download links") : ""]);
    show(
      el("h1", {}, "Run ", el("code", {}, run.id), " ", status(run.status)),
      el("dl", { class: "facts" },
        el("dt", {}, "session"), el("dd", {}, link(`#/sessions/${run.session_id}`, run.session_id)),
        el("dt", {}, "model"), el("dd", {}, `${run.base_model} @ ${run.model_revision.slice(0, 12)}`),
        el("dt", {}, "LoRA"), el("dd", {}, `rank ${run.lora.rank}, seed ${run.lora.seed}`),
        el("dt", {}, "operations"), el("dd", {}, String(run.next_seq_id - 1)),
        el("dt", {}, "weights"), el("dd", {}, `version ${run.latest_weight_version}`),
        el("dt", {}, "sampler"), el("dd", {}, sampler ? [sampler.id, " ", status(sampler.status), ` synced version ${sampler.synced_weight_version}`] : "none yet"),
        el("dt", {}, "cost"), el("dd", {}, `${typeof cost.total_microusd === "number" ? `${(cost.total_microusd / 1e6).toFixed(6)} USD` : cost.total_microusd}` +
          ` (${cost.settlement_status}; at most ${(cost.estimated_max_microusd / 1e6).toFixed(6)} USD with the work admitted)`)),
      el("h2", {}, "Curves"),
      curves.length ? el("div", { class: "curves" }, curves) : el("p", { class: "empty" }, "no training steps yet"),
      el("h2", {}, "Operations"),
      table(["seq", "kind", "status", "took", "progress", "error"], ops.items.slice().reverse().map((o) => [o.seq_id, o.kind, status(o.status),
        ["succeeded", "failed", "cancelled"].includes(o.status) ? `${Math.max(0, Date.parse(o.updated_at) - Date.parse(o.created_at))} ms` : "",
        o.progress ? `${o.progress.tokens_done}/${o.progress.tokens_total} tokens, ${num(o.progress.tokens_per_s, 0)}/s` : "", o.error_code || ""])),
      el("h2", {}, "Checkpoints"),
      table(["checkpoint", "name", "step", "bytes", "status", "created"], cps.items.map((c) => [c.id, c.name || "", c.step, c.size_bytes, status(c.status), when(c.created_at)])),
      el("h2", {}, "Artifacts"),
      table(["artifact", "kind", "bytes", "status", "created", "files"], artifactRows));
    return LIVE_RUN.has(run.status);
  });
}

async function sessionPage(id) {
  live(async () => {
    const [s, cost, usage] = await Promise.all([get(`${T}/sessions/${id}`), get(`${T}/sessions/${id}/cost`), get(`${T}/sessions/${id}/usage`)]);
    show(
      el("h1", {}, "Session ", el("code", {}, s.id), " ", status(s.status)),
      el("dl", { class: "facts" },
        el("dt", {}, "provider"), el("dd", {}, `${s.provider} (${s.funding_source})`),
        el("dt", {}, "run"), el("dd", {}, s.run_id ? link(`#/runs/${s.run_id}`, s.run_id) : "none yet"),
        el("dt", {}, "lease"), el("dd", {}, `until ${when(s.lease_expires_at)} (idle ${s.idle_ttl_s} s)`),
        el("dt", {}, "ceiling"), el("dd", {}, s.max_cost_microusd === null ? "none (byok)" : `${(s.max_cost_microusd / 1e6).toFixed(2)} USD`),
        el("dt", {}, "cost"), el("dd", {}, typeof cost.total_microusd === "number" ? `${(cost.total_microusd / 1e6).toFixed(6)} USD` : cost.total_microusd)),
      el("h2", {}, "Usage"),
      table(["operation", "meter", "quantity", "unit", "cost (µUSD)", "settlement"], usage.items.map((u) =>
        [u.operation_id, u.meter, u.quantity, u.unit, u.cost_microusd, status(u.settlement_status)])));
    return s.status === "ready" || s.status === "closing";
  });
}

// ---- signing in ----------------------------------------------------------------

function signOut() {
  sessionStorage.removeItem(KEY);
  metricsCache.clear();
  route();
}

function route() {
  clearTimeout(timer);
  const signedIn = !!sessionStorage.getItem(KEY);
  document.getElementById("signin").hidden = signedIn;
  document.getElementById("nav").hidden = !signedIn;
  if (!signedIn) { show(); return; }
  const [, kind, id] = location.hash.replace(/^#/, "").split("/");
  if (kind === "runs" && id) runPage(id);
  else if (kind === "sessions" && id) sessionPage(id);
  else homePage();
}

document.getElementById("signin").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const key = document.getElementById("key").value.trim();
  sessionStorage.setItem(KEY, key);
  try {
    await get(`${T}/models`);
    document.getElementById("key").value = "";
    document.getElementById("signin-error").textContent = "";
    route();
  } catch (e) {
    sessionStorage.removeItem(KEY);
    document.getElementById("signin-error").textContent = e instanceof APIError && e.status === 401 ? "That key is not valid." : String(e.message || e);
  }
});
document.getElementById("signout").addEventListener("click", signOut);
window.addEventListener("hashchange", route);
route();
