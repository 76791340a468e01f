// gpuplan serve: the page. It renders what the API answers and computes nothing: every number is
// the library's (POST /api/fit returns what `gpuplan fit --json` prints), every choice and default
// comes from GET /api/options. Plain JavaScript, no network beyond this server.
"use strict";

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 60;
let OPTIONS = null;          // GET /api/options
let GPUS = [];               // GET /api/gpus
let seq = 0;                 // the latest update's number: older answers are dropped
let timer = null;
let controller = null;

// ---- formatting (display only) ------------------------------------------------------------
const GB = (b) => (b / 1e9).toFixed(2) + " GB";
const signedGB = (b) => (b < 0 ? "−" : "+") + GB(Math.abs(b));
function num(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (x >= 1e5) return x.toExponential(2);
  return Number(x.toPrecision(digits)).toLocaleString("en-US");
}
// A rate as the CLI prints it (units.format_per_s): whole and grouped from 10 up, three
// significant digits below, so the page's expected range reads as `gpuplan speed`'s.
function perS(x) {
  if (x === 0 || Math.abs(x) >= 10) return Math.round(x).toLocaleString("en-US");
  return String(Number(x.toPrecision(3)));
}
function seconds(s) {
  if (s < 1e-3) return (s * 1e6).toFixed(1) + " µs";
  if (s < 1) return (s * 1e3).toFixed(1) + " ms";
  return s.toFixed(2) + " s";
}
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k === "style") e.style.cssText = v;  // CSSOM: allowed by the page's CSP, unlike a style attribute
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, text = null) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

// ---- state: the form <-> a job body <-> the URL ---------------------------------------------
function fields() { return document.querySelectorAll("#job [data-key]"); }

// A list field (cuda_graph_scope) is its comma text on the page, in the URL and on the command
// line (the CLI's S1,S2), and a JSON list in the body.
function listOf(raw) { return raw.split(",").map((t) => t.trim()).filter(Boolean); }

function readForm() {
  const job = {};
  for (const f of fields()) {
    const key = f.dataset.key, type = f.dataset.type;
    if (type === "bool") { if (f.checked) job[key] = true; continue; }
    const raw = f.value.trim();
    if (raw === "") continue;
    if (type === "int") job[key] = /^\d+$/.test(raw) ? Number(raw) : raw;  // the server names a bad value
    else if (type === "list") job[key] = listOf(raw);
    else job[key] = raw;
  }
  const config = $("config").value.trim();
  if (config) { delete job.model; }
  const gpus = [$("gpu").value, ...[...document.querySelectorAll("#compare-list input:checked")]
    .map((c) => c.value).filter((g) => g !== $("gpu").value)];
  // Only what differs from the defaults goes in the URL and the command; the body may hold all.
  const d = OPTIONS.defaults;
  for (const k of Object.keys(job)) if (k !== "model" && job[k] === d[k]) delete job[k];
  return { job, config, gpus, overhead: $("overhead").value };
}

function writeForm(state) {
  const d = OPTIONS.defaults;
  for (const f of fields()) {
    const key = f.dataset.key;
    const v = key in state.job ? state.job[key] : d[key];
    if (f.dataset.type === "bool") f.checked = !!v;
    else f.value = v === null || v === undefined ? "" : String(v);
  }
  $("config").value = state.config || "";
  if (state.config) $("paste").open = true;
  const gpus = state.gpus && state.gpus.length ? state.gpus : [OPTIONS.default_gpus[1]];
  $("gpu").value = gpus[0];
  for (const c of document.querySelectorAll("#compare-list input")) c.checked = gpus.slice(1).includes(c.value);
  if (gpus.length > 1) $("compare").open = true;
  if (["tp", "pp", "cp", "ep", "sequence_parallel", "micro_batches"].some((k) => k in state.job)) $("layout").open = true;
  $("overhead").value = state.overhead || "expected";
}

function toURL(state) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(state.job)) p.set(k, String(v));
  p.set("gpu", state.gpus.join(","));
  if (state.overhead !== "expected") p.set("overhead", state.overhead);
  return "?" + p.toString();
}

function fromURL() {
  const p = new URLSearchParams(location.search);
  const types = {};
  for (const f of fields()) types[f.dataset.key] = f.dataset.type;
  const job = {};
  for (const [k, v] of p) {
    if (!(k in types)) continue;
    if (types[k] === "bool") job[k] = v === "true";
    else if (types[k] === "int") job[k] = /^\d+$/.test(v) ? Number(v) : v;
    else if (types[k] === "list") job[k] = listOf(v);
    else job[k] = v;
  }
  if (!("model" in job)) job.model = "llama-3.1-8b";
  const gpus = (p.get("gpu") || "").split(",").filter(Boolean);
  return { job, config: "", gpus, overhead: p.get("overhead") || "expected" };
}

function body(state, extra = {}) {
  const b = { ...state.job, gpu: state.gpus, overhead: state.overhead, ...extra };
  if (state.config) b.config = state.config;
  return b;
}

// ---- the CLI command that prints the same numbers -------------------------------------------
function quote(s) { return /^[\w@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }

function cliCommand(state) {
  const j = state.job, argv = ["gpuplan", "fit"];
  argv.push(state.config ? "config.json" : quote(j.model || ""));
  const mode = j.mode || OPTIONS.defaults.mode;
  if (j.mode) argv.push("--mode", j.mode);
  // --precision is the recipe, or in infer mode the weight format (as the CLI reads it)
  if (mode === "infer") { if (j.infer_precision) argv.push("--precision", j.infer_precision); }
  else {
    if (j.precision) argv.push("--precision", j.precision);
    if (j.infer_precision && mode !== "train") argv.push("--infer-precision", j.infer_precision);
  }
  for (const [k, v] of Object.entries(j)) {
    if (["model", "mode", "precision", "infer_precision"].includes(k)) continue;
    const flag = "--" + k.replace(/_/g, "-");
    if (v === true) argv.push(flag);
    else if (v !== false) argv.push(flag, quote(String(v)));
  }
  for (const g of state.gpus) argv.push("--gpu", quote(g));
  if (state.overhead !== "expected") argv.push("--overhead", state.overhead);
  argv.push("--json");
  return argv.join(" ");
}

// ---- talking to the server ------------------------------------------------------------------
async function api(path, payload, signal) {
  const r = await fetch(path, payload === undefined ? { signal } : {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(payload), signal,
  });
  const data = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(data.error || `HTTP ${r.status}`);
  return data;
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(update, DEBOUNCE_MS);
}

async function update() {
  const state = readForm();
  const mine = ++seq;
  if (controller) controller.abort();
  controller = new AbortController();
  const signal = controller.signal;
  history.replaceState(null, "", toURL(state));
  $("cli-text").textContent = cliCommand(state) + (state.config ? "   # config.json: the pasted text" : "");
  $("results").setAttribute("aria-busy", "true");
  $("status").textContent = "computing…";
  const t0 = performance.now();
  try {
    // fast answer first (no solver), then the solver where the job does not fit: the numbers are
    // the same, the suggestions arrive a moment later
    const plan = await api("/api/fit", body(state, { suggest: false }), signal);
    if (mine !== seq) return;
    showError(null);
    render(plan, state);
    const ms = performance.now() - t0;
    $("status").textContent = `updated in ${ms.toFixed(0)} ms`;
    $("status").dataset.ms = ms.toFixed(1);
    const misses = plan.gpus.some((g) => g.train_fits === false || g.infer_fits === false);
    // the plan's own speed row says when this GPU cannot run the job's dtype: shown, not re-asked
    const row = plan.speed ? plan.speed.gpus.find((r) => r.gpu === plan.gpus[0].name) : null;
    const speedP = row && row.error ? Promise.resolve(speedError(plan.gpus[0].name, row.error))
      : api("/api/speed", { ...body(state), gpu: state.gpus[0], overhead: undefined }, signal)
        .then((s) => { if (mine === seq) renderSpeed(plan, s); })
        .catch((e) => { if (mine === seq && e.name !== "AbortError") speedError(state.gpus[0], e.message); });
    if (misses) {
      $("suggestions").replaceChildren(el("h2", { text: "Cheapest changes that fit" }), el("p", { text: "searching…" }));
      const full = await api("/api/fit", body(state), signal);
      if (mine === seq) renderSuggestions(full, state);
    } else {
      renderSuggestions(plan, state);
    }
    await speedP;
  } catch (e) {
    if (e.name === "AbortError" || mine !== seq) return;
    showError(e.message);
  } finally {
    if (mine === seq) $("results").setAttribute("aria-busy", "false");
  }
}

function showError(msg) {
  const e = $("error");
  e.hidden = !msg;
  e.textContent = msg || "";
  if (msg) { $("status").textContent = "not updated: fix the input named below"; }
}

// ---- rendering ------------------------------------------------------------------------------
const MODES = [["train", "Training"], ["infer", "Inference"]];
const VERDICT_MARK = { "fits": "✔ fits", "tight": "≈ tight", "does not fit": "✘ does not fit" };

function render(plan, state) {
  $("model-info").textContent = `${plan.model.name}: ${num(plan.model.params / 1e9)}B parameters` +
    (plan.model.layers ? `, ${plan.model.layers} layers, context ${plan.model.max_position_embeddings}` : "");
  renderVerdicts(plan);
  renderMemory(plan);
  renderTimeline(plan);
  renderNotes(plan);
}

function renderVerdicts(plan) {
  const g = plan.gpus[0];
  const box = el("div", { class: "cards" });
  for (const [m, title] of MODES) {
    if (!plan[m]) continue;
    const v = g[`${m}_verdict`], head = g[`${m}_headroom_bytes`];
    const total = plan[m].per_gpu.total_bytes;
    const min = m === "train" ? g.train_min_gpus_zero3 : g.infer_min_gpus_tensor_parallel;
    box.append(el("article", { class: `card verdict ${v.replace(/ /g, "-")}`, "data-mode": m },
      el("h2", { text: `${title} on ${g.name}` }),
      el("p", { class: "big", "data-verdict": v, text: VERDICT_MARK[v] }),
      el("p", {}, "needs ", el("strong", { "data-bytes": total, "data-field": `${m}.total`, text: GB(total) }),
        " of ", el("span", { "data-bytes": g.usable_bytes, text: GB(g.usable_bytes) })),
      el("p", {}, "headroom ", el("strong", { "data-bytes": head, "data-field": `${m}.headroom`, text: signedGB(head) })),
      el("p", { class: "hint", text: min === null ? `no count of ${g.name} fits it` : min === 1 ? "one GPU is enough" :
        m === "train" ? `fits on ${min} × ${g.name} with ZeRO-3` : `fits with tensor parallel over ${min} × ${g.name}` })));
  }
  $("verdicts").replaceChildren(box);
}

function renderMemory(plan) {
  const out = [el("h2", { text: "Memory per GPU" })];
  for (const [m, title] of MODES) {
    const mem = plan[m];
    if (!mem) continue;
    const lines = mem.lines ? mem.lines.filter((l) => l.bytes > 0)
      : Object.entries(mem.per_gpu).filter(([k, b]) => k !== "total_bytes" && b > 0)
          .map(([k, b]) => ({ key: k.replace(/_bytes$/, ""), label: k.replace(/_bytes$/, "").replace(/_/g, " "), bytes: b }));
    const total = mem.per_gpu.total_bytes;
    const scale = Math.max(total, ...plan.gpus.map((g) => g.usable_bytes));
    const sec = el("section", { class: "bars", "aria-label": `${title} memory per GPU` }, el("h3", { text: title }));
    for (const g of plan.gpus) {
      const bar = el("div", { class: "bar", role: "img",
        "aria-label": `${title} on ${g.name}: ${GB(total)} of ${GB(g.usable_bytes)}; ` +
          lines.map((l) => `${l.label} ${GB(l.bytes)}`).join(", ") });
      lines.forEach((l, i) => bar.append(el("span", {
        class: `seg p${i % 8}`, style: `width:${(100 * l.bytes / scale).toFixed(3)}%`,
        title: `${l.label}: ${GB(l.bytes)}`, "data-key": l.key, "data-bytes": l.bytes,
      }, el("span", { class: "seg-label", text: String(i + 1) }))));
      bar.append(el("span", { class: "cap", style: `left:${(100 * g.usable_bytes / scale).toFixed(3)}%`,
        title: `${g.name} capacity ${GB(g.usable_bytes)}` }));
      const v = g[`${m}_verdict`];
      sec.append(el("div", { class: "bar-row", "data-gpu": g.name },
        el("div", { class: "bar-name" }, el("strong", { text: g.name }),
          ` ${GB(total)} / ${GB(g.usable_bytes)} — ${VERDICT_MARK[v]}`), bar));
    }
    const legend = el("ol", { class: "legend" });
    lines.forEach((l, i) => legend.append(el("li", {},
      el("span", { class: `swatch p${i % 8}`, "aria-hidden": "true" }),
      el("span", { text: `${i + 1}. ${l.label}: ` }), el("strong", { "data-key": l.key, "data-bytes": l.bytes, text: GB(l.bytes) }),
      l.note ? el("span", { class: "hint", text: ` — ${l.note}` }) : null)));
    legend.append(el("li", {}, el("span", { class: "swatch capmark", "aria-hidden": "true" }), el("span", { text: "| the GPU's capacity" })));
    sec.append(legend);
    out.push(sec);
  }
  $("memory").replaceChildren(...out);
}

function renderTimeline(plan) {
  const out = [el("h2", { text: "Through the step: memory by phase" })];
  const cap = plan.gpus[0].usable_bytes;
  for (const [m, title] of MODES) {
    const mem = plan[m];
    if (!mem || !mem.phases) continue;
    const phases = Object.entries(mem.phases);
    const scale = Math.max(cap, ...phases.map(([, b]) => b));
    const list = el("ol", { class: "timeline", "aria-label": `${title} phases` });
    for (const [name, b] of phases) {
      const peak = name === mem.peak_phase;
      list.append(el("li", { class: peak ? "peak" : null, "data-phase": name },
        el("span", { class: "ph-name", text: name }),
        el("span", { class: "ph-bar" }, el("span", { class: "ph-fill", style: `width:${(100 * b / scale).toFixed(3)}%` }),
          el("span", { class: "cap", style: `left:${(100 * cap / scale).toFixed(3)}%` })),
        el("span", { class: "ph-val", "data-bytes": b, text: GB(b) + (peak ? "  ▲ peak" : "") })));
    }
    const over = mem.per_gpu.overhead_bytes;
    out.push(el("section", {}, el("h3", { text: title }), list,
      el("p", { class: "hint", text: `tensors live in each phase; the runtime overhead (${GB(over)}) comes on top. ` +
        (mem.activation_detail ? `Activation peak: ${mem.activation_detail.backward_peak_at || mem.activation_detail.forward_peak_at}.` : "") })));
  }
  $("timeline").replaceChildren(...out);
}

function applySuggestion(s) {
  const state = readForm();
  for (const [k, v] of Object.entries(s.job)) {
    if (k === "model" || k === "mode") continue;   // the model and the plan's mode stay
    state.job[k] = Array.isArray(v) ? v.join(",") : v;
  }
  state.gpus = [s.gpu, ...state.gpus.filter((g) => g !== s.gpu)];
  writeForm(state);
  update();
  $("results").focus();
}

function renderSuggestions(plan, state) {
  const box = [el("h2", { text: "Cheapest changes that fit" })];
  if (!plan.suggestions.length) {
    const all = plan.gpus.every((g) => g.train_fits !== false && g.infer_fits !== false);
    box.push(el("p", { text: all ? "It fits as it is: no change needed." : "No change the solver tries makes it fit." }));
  }
  const list = el("ol", { class: "suggestions" });
  for (const s of plan.suggestions) {
    const tp = s.changes.some((c) => c.knob === "tensor_parallel");
    list.append(el("li", {}, el("button", {
      type: "button", class: "suggestion", disabled: tp ? true : null,
      title: tp ? "tensor parallelism is not a fit option yet: shown for information" : "apply this change",
      onclick: () => applySuggestion(s) },
      el("strong", { text: `${s.mode}: ${s.summary}` }),
      el("span", { text: ` → peak ${GB(s.peak_bytes)} on ${s.gpus > 1 ? s.gpus + " × " : ""}${s.gpu}, headroom ${signedGB(s.headroom_bytes)}` }),
      el("span", { class: "hint", text: ` — ${s.cost_kind}: ${s.changes.map((c) => c.cost).join("; ")}` }))));
  }
  box.push(list);
  $("suggestions").replaceChildren(...box);
}

function renderNotes(plan) {
  const notes = [...plan.notes, ...(plan.train ? plan.train.notes : []), ...(plan.infer ? plan.infer.notes : [])];
  $("notes").replaceChildren(...(notes.length ? [el("h2", { text: "Notes" }), el("ul", {}, ...notes.map((n) => el("li", { text: n })))] : []));
}

// ---- speed and the roofline -----------------------------------------------------------------
function speedError(gpu, message) {
  $("speed").replaceChildren(el("h2", { text: `Speed on ${gpu}` }),
    el("section", { class: "card speed", "data-error": "1" }, el("p", { class: "error", text: message })));
}

function renderSpeed(plan, sp) {
  const out = [el("h2", { text: `Speed on ${sp.gpu}` })];
  for (const [m, title] of MODES) {
    const s = sp[m];
    if (!s) continue;
    const e = s.estimate, c = s.ceiling;
    const unit = m === "infer" ? "decode tokens/s" : "tokens/s";
    out.push(el("section", { class: "card speed", "data-mode": m }, el("h3", { text: title }),
      el("p", { class: "big" }, el("span", { "data-field": `${m}.tokens_per_s`, "data-value": e.tokens_per_s, text: num(e.tokens_per_s) }), ` ${unit}`),
      expectedRange(m, e, unit),
      el("p", { "data-field": `${m}.ceiling`, "data-value": c.tokens_per_s, text: `ceiling: ${num(c.tokens_per_s)} ${unit} (the same model with every kernel at 100% of the datasheet peak and bandwidth)` }),
      el("p", { text: `step ${seconds(e.step_time_s)} (ceiling ${seconds(c.step_time_s)}), MFU ${(100 * e.mfu).toFixed(1)}%, ${e.bound}-bound, ${num(e.flops_per_step)} FLOPs per step` }),
      m === "infer" && e.prefill ? el("p", { text: `prefill ${num(e.prefill.tokens_per_s)} tokens/s (${e.prefill.bound}-bound); TTFT (time to first token) ${seconds(e.ttft_s)}, TPOT (time per output token) ${seconds(e.tpot_s)}; a request of ${e.new_tokens} new tokens takes ${seconds(e.request_time_s)}` }) : null,
      roofline(e, sp.memory_bandwidth, title)));
  }
  $("speed").replaceChildren(...out);
}

// The CLI's "Expected range" line (report/speed.py, _print_basis): where a measured rate falls,
// the estimate over the p90..p10 of predicted/measured on the published runs.
function expectedRange(m, e, unit) {
  const [lo, hi] = e.tokens_per_s_range, rb = e.range_basis;
  return el("p", { "data-field": `${m}.tokens_per_s_range`, "data-lo": lo, "data-hi": hi,
    text: `expected range: ${perS(lo)}-${perS(hi)} ${unit} (the estimate over the p90-p10 of predicted/measured, ${rb.p10_ratio.toFixed(2)}-${rb.p90_ratio.toFixed(2)}, on ${rb.runs} published runs; docs/speed.md, Calibration)` });
}

function roofline(e, bw, title) {
  const W = 360, H = 220, L = 48, B = 32, T = 10, R = 10;
  const peak = e.peak_flops;
  const pts = [];
  for (const [phase, mark] of [[e.step, "●"], [e.prefill, "■"]]) {
    if (!phase) continue;
    for (const c of phase.classes) if (c.intensity > 0 && c.time_s > 0) pts.push({ x: c.intensity, y: c.flops / c.time_s, name: c.class, mark, phase: phase.name });
  }
  const xs = pts.map((p) => p.x).concat([peak / bw]);
  const x0 = Math.pow(10, Math.floor(Math.log10(Math.min(...xs)) - 0.3)), x1 = Math.pow(10, Math.ceil(Math.log10(Math.max(...xs)) + 0.3));
  const y1 = Math.pow(10, Math.ceil(Math.log10(peak * 1.2))), y0 = Math.min(y1 / 1e4, ...pts.map((p) => p.y / 2));
  const X = (x) => L + (W - L - R) * (Math.log10(x) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0));
  const Y = (y) => T + (H - T - B) * (1 - (Math.log10(y) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0)));
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "roofline", role: "img",
    "aria-label": `${title} roofline: peak ${num(peak)} FLOP/s, ridge at ${num(peak / bw)} FLOP/byte; ` +
      pts.map((p) => `${p.phase} ${p.name} at ${num(p.x)} FLOP/byte, ${num(p.y)} FLOP/s`).join("; ") });
  s.append(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "frame" }));
  const ridge = peak / bw;
  const xa = Math.max(x0, y0 / bw);
  s.append(svg("polyline", { class: "roof", points: `${X(xa)},${Y(bw * xa)} ${X(ridge)},${Y(peak)} ${X(x1)},${Y(peak)}` }));
  s.append(svg("text", { x: X(ridge) + 4, y: Y(peak) + 12, class: "small" }, `peak ${num(peak / 1e12)} TFLOP/s`));
  s.append(svg("text", { x: L + 4, y: H - B - 6, class: "small" }, `bandwidth ${num(bw / 1e12)} TB/s`));
  for (const p of pts) {
    s.append(svg("text", { x: X(p.x), y: Y(p.y), class: "pt", "text-anchor": "middle", "dominant-baseline": "middle" }, p.mark));
    s.append(svg("text", { x: X(p.x) + 6, y: Y(p.y) - 6, class: "small" }, p.name));
  }
  s.append(svg("text", { x: (L + W) / 2, y: H - 4, class: "small", "text-anchor": "middle" }, "FLOP per byte (log)"));
  s.append(svg("text", { x: 12, y: (T + H - B) / 2, class: "small", "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, "FLOP/s (log)"));
  return el("figure", {}, s, el("figcaption", { text: "● the step's op classes, ■ prefill; the line is the roofline of the datasheet peaks" }));
}

// ---- capacity: serving under load (POST /api/capacity answers what `gpuplan capacity --json`
// prints; the page draws it and computes nothing) -----------------------------------------------
let capController = null;

function readCapacity() {
  const b = { sweep: true };
  const search = $("cap-layout").value === "search";
  for (const f of document.querySelectorAll("#capacity-form [data-cap]")) {
    if (f.dataset.layout && (f.dataset.layout === "search") !== search) continue;
    const raw = f.value.trim();
    if (raw === "") continue;
    const t = f.dataset.type;
    b[f.dataset.cap] = (t === "int" || t === "num") && raw !== "" && !Number.isNaN(Number(raw)) ? Number(raw) : raw;
  }
  if (b.slo_percentile === 99) delete b.slo_percentile;
  return b;
}

function capacityCommand(b) {
  const argv = ["gpuplan", "capacity", quote(String(b.model || "")), "--gpu", quote(String(b.gpu || ""))];
  for (const [k, v] of Object.entries(b)) {
    if (["model", "gpu", "sweep"].includes(k)) continue;
    argv.push("--" + k.replace(/_/g, "-"), quote(String(v)));
  }
  argv.push("--sweep", "--json");
  return argv.join(" ");
}

async function updateCapacity() {
  const b = readCapacity();
  $("cap-cli").textContent = capacityCommand(b);
  if (capController) capController.abort();
  capController = new AbortController();
  const box = $("cap-results");
  box.setAttribute("aria-busy", "true");
  $("cap-status").textContent = "simulating…";
  const t0 = performance.now();
  try {
    const d = await api("/api/capacity", b, capController.signal);
    $("cap-error").hidden = true;
    renderCapacity(d);
    const ms = performance.now() - t0;
    $("cap-status").textContent = `simulated in ${ms.toFixed(0)} ms`;
    $("cap-status").dataset.ms = ms.toFixed(1);
  } catch (e) {
    if (e.name === "AbortError") return;
    $("cap-error").hidden = false;
    $("cap-error").textContent = e.message;
    $("cap-status").textContent = "not simulated: fix the input named below";
    $("cap-summary").replaceChildren(); $("cap-table").replaceChildren(); $("cap-chart").replaceChildren();
  } finally {
    box.setAttribute("aria-busy", "false");
  }
}

const LATENCIES = [["ttft_s", "TTFT (time to first token)"], ["tpot_s", "TPOT (time per output token)"],
  ["itl_s", "ITL (inter-token latency)"], ["e2e_s", "E2E (end to end)"], ["queue_s", "queue"]];

function capValue(field, v, text) {
  return el("span", { "data-field": field, "data-value": v === null || v === undefined ? "" : v, text });
}

function renderCapacity(d) {
  const lay = d.layout, w = d.workload, th = d.throughput;
  const load = w.rate ? `${num(w.rate)} req/s (${w.arrivals})` : w.concurrency ? `concurrency ${w.concurrency}` : "trace";
  const summary = [el("p", {}, el("strong", { text: `${d.model} on ${d.gpus} × ${d.gpu}` }),
    ` — ${d.engine} ${d.engine_version}, TP ${lay.tp} × PP ${lay.pp} × `, capValue("layout.replicas", lay.replicas, String(lay.replicas)),
    ` replica(s); ${load}, ${w.requests} requests of ${num(w.mean_input_tokens)} in / ${num(w.mean_output_tokens)} out (mean)`)];
  if (d.meets_slo !== null && d.meets_slo !== undefined) {
    summary.push(el("p", { class: d.meets_slo ? "verdict-ok" : "verdict-bad", "data-field": "meets_slo", "data-value": String(d.meets_slo),
      text: `${d.meets_slo ? "✔ meets" : "✘ misses"} the p${d.slo.percentile} SLO; attainment ${(100 * d.attainment).toFixed(1)}%` }));
  }
  $("cap-summary").replaceChildren(...summary);

  const t = el("table", { class: "captab", "aria-label": "latency percentiles" },
    el("thead", {}, el("tr", {}, ...["latency", "mean", "p50", "p90", "p99"].map((h) => el("th", { scope: "col", text: h })))));
  const tb = el("tbody");
  for (const [key, label] of LATENCIES) {
    const s = d[key];
    tb.append(el("tr", { "data-latency": key }, el("th", { scope: "row", text: label }),
      ...["mean", "p50", "p90", "p99"].map((q) => el("td", {}, capValue(`${key}.${q}`, s[q], seconds(s[q]))))));
  }
  t.append(tb);
  const rows = [
    ["throughput", capValue("throughput.requests_per_s", th.requests_per_s, `${num(th.requests_per_s)} req/s`),
      `, ${num(th.output_tokens_per_s)} output tokens/s, ${num(th.input_tokens_per_s)} input tokens/s`],
    ["goodput", d.goodput_requests_per_s === null ? "— (no SLO given)" :
      capValue("goodput_requests_per_s", d.goodput_requests_per_s, `${num(d.goodput_requests_per_s)} req/s within the SLO`)],
    ["cost", d.cost_per_m_output_tokens === null ? "— (no price given)" :
      capValue("cost_per_m_output_tokens", d.cost_per_m_output_tokens, `$${num(d.cost_per_m_output_tokens)} per million output tokens`)],
    ["KV cache", `${d.kv.kv_tokens.toLocaleString("en-US")} tokens per replica, ${(100 * d.kv.utilization_peak).toFixed(1)}% peak use; ${d.preemptions} preemptions`],
  ];
  const facts = el("ul", { class: "cap-facts" }, ...rows.map(([k, ...v]) => el("li", {}, el("strong", { text: k + ": " }), ...v)));
  const out = [el("h3", { text: "Latency" }), t, facts];
  if (d.searched) {
    const st = el("table", { class: "captab", "aria-label": "layouts tried" },
      el("thead", {}, el("tr", {}, ...["TP", "PP", "replicas", "GPUs", "meets", "p99 TTFT", "p99 TPOT"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...d.searched.map((c) => el("tr", {}, ...[c.tp, c.pp, c.replicas, c.gpus, c.meets_slo ? "yes" : "no",
        seconds(c.ttft_p99_s), seconds(c.tpot_p99_s)].map((x) => el("td", { text: String(x) }))))));
    out.push(el("h3", { text: "Layouts tried (fewest replicas meeting the SLO per TP)" }), st);
  }
  $("cap-table").replaceChildren(...out);
  $("cap-chart").replaceChildren(...(d.sweep ? [latencyChart(d.sweep, "ttft_s", "TTFT", d.slo && d.slo.ttft_s),
    latencyChart(d.sweep, "tpot_s", "TPOT", d.slo && d.slo.tpot_s)] : []));
}

// Latency percentiles against the measured request rate of each sweep point, linear axes; the
// SLO target as a line, the knee (first p99 TTFT over 3x the lowest load's) as a dashed line.
function latencyChart(sw, key, name, target) {
  const W = 420, H = 240, L = 56, B = 34, T = 12, R = 12;
  const pts = sw.points;
  const xs = pts.map((p) => p.requests_per_s);
  const ys = pts.flatMap((p) => [p[key].p50, p[key].p90, p[key].p99]).concat(target ? [target] : []);
  const x1 = Math.max(...xs) * 1.05, y1 = Math.max(...ys) * 1.1;
  const X = (x) => L + (W - L - R) * x / x1;
  const Y = (y) => T + (H - T - B) * (1 - y / y1);
  const label = `${name} p50, p90 and p99 against requests/s over ${pts.length} loads` +
    (target ? `; SLO ${seconds(target)}` : "") + (sw.knee !== null ? `; knee at ${num(sw.knee_requests_per_s)} req/s` : "");
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "lat", role: "img", "aria-label": label, "data-chart": key });
  s.append(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "frame" }));
  for (const f of [0, 0.5, 1]) {
    s.append(svg("text", { x: L - 4, y: Y(y1 * f / 1.1) + 3, class: "small", "text-anchor": "end" }, f === 0 ? "0" : seconds(y1 * f / 1.1)));
    s.append(svg("text", { x: X(x1 * f / 1.05), y: H - B + 12, class: "small", "text-anchor": "middle" }, num(x1 * f / 1.05)));
  }
  for (const q of ["p50", "p90", "p99"]) {
    s.append(svg("polyline", { class: `q${q.slice(1)}`, "data-q": q, points: pts.map((p) => `${X(p.requests_per_s).toFixed(1)},${Y(p[key][q]).toFixed(1)}`).join(" ") }));
    for (const p of pts) s.append(svg("circle", { class: "dot", r: 2, cx: X(p.requests_per_s).toFixed(1), cy: Y(p[key][q]).toFixed(1),
      "data-q": q, "data-rate": p.requests_per_s, "data-value": p[key][q] }));
  }
  if (target) {
    s.append(svg("line", { class: "slo", x1: L, x2: W - R, y1: Y(target), y2: Y(target), "data-value": target }));
    s.append(svg("text", { x: W - R - 2, y: Y(target) - 3, class: "small", "text-anchor": "end" }, `SLO ${seconds(target)}`));
  }
  if (sw.knee !== null) {
    const kx = X(sw.knee_requests_per_s);
    s.append(svg("line", { class: "knee", x1: kx, x2: kx, y1: T, y2: H - B, "data-value": sw.knee_requests_per_s }));
    s.append(svg("text", { x: kx + 3, y: T + 10, class: "small" }, "knee"));
  }
  s.append(svg("text", { x: (L + W) / 2, y: H - 4, class: "small", "text-anchor": "middle" }, "requests/s (measured at each load)"));
  s.append(svg("text", { x: 12, y: (T + H - B) / 2, class: "small", "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, name));
  return el("figure", {}, s, el("figcaption", { text: `${name}: p50 solid, p90 dashed, p99 dotted; ${sw.load} at 0.25× to 2× the given one` }));
}

// ---- start ----------------------------------------------------------------------------------
function fillSelect(sel, values, none) {
  sel.replaceChildren(...(none ? [el("option", { value: "", text: none })] : []),
    ...values.map((v) => el("option", { value: String(v), text: String(v) })));
}

async function start() {
  [OPTIONS, { gpus: GPUS }] = await Promise.all([api("/api/options"), api("/api/gpus")]);
  for (const key of ["mode", "engine", "precision", "infer_precision", "optimizer",
    "optimizer_states", "master_weights", "checkpointing", "cuda_graph_scope", "attention",
    "kv_dtype", "lora_base", "zero", "overhead"]) {
    const sel = $(key);
    fillSelect(sel, OPTIONS[key], sel.dataset.none);
  }
  // auto is one stated engine, the same the command line states
  const auto = $("engine").querySelector('option[value="auto"]');
  if (auto) auto.textContent = `auto (${OPTIONS.engine_auto})`;
  fillSelect($("gpu"), GPUS.map((g) => g.name));
  $("compare-list").replaceChildren(...GPUS.map((g) => el("label", {},
    el("input", { type: "checkbox", value: g.name }), ` ${g.name} (${g.memory_label})`)));
  api("/api/models").then((d) => $("model-list").replaceChildren(
    ...d.models.map((m) => el("option", { value: m.name, label: `${m.family}, ${num(m.params / 1e9)}B` }))));
  writeForm(fromURL());
  $("job").addEventListener("input", schedule);
  $("job").addEventListener("change", schedule);
  $("job").addEventListener("submit", (e) => { e.preventDefault(); update(); });
  $("copy").addEventListener("click", async () => {
    const text = $("cli-text").textContent;
    try { await navigator.clipboard.writeText(text); $("copy").textContent = "Copied"; }
    catch { const r = document.createRange(); r.selectNodeContents($("cli-text")); getSelection().removeAllRanges(); getSelection().addRange(r); $("copy").textContent = "Selected: press Ctrl-C"; }
    setTimeout(() => { $("copy").textContent = "Copy as CLI command"; }, 2000);
  });
  $("reset").addEventListener("click", () => { writeForm({ job: { model: "llama-3.1-8b" }, gpus: [], overhead: "expected" }); update(); });
  fillSelect($("cap-gpu"), GPUS.map((g) => g.name));
  $("cap-gpu").value = OPTIONS.default_gpus[1];
  $("cap-model").value = "llama-3.1-8b";
  $("capacity-form").addEventListener("submit", (e) => { e.preventDefault(); updateCapacity(); });
  $("capacity-form").addEventListener("input", () => { $("cap-cli").textContent = capacityCommand(readCapacity()); });
  $("cap-cli").textContent = capacityCommand(readCapacity());
  document.body.dataset.ready = "1";
  update();
}

document.addEventListener("DOMContentLoaded", () => start().catch((e) => showError(e.message)));
