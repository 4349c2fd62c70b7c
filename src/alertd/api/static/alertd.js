// alertd's pages: overview, run, silences, dry-run. Plain JavaScript, no build step, nothing from a CDN.
// Data comes from the JSON API next to the pages (relative URLs, so a path prefix in front works).
// With a token set on the server, the page asks for it once and keeps it in this tab's sessionStorage.
// Every value from the API is put in the page as text (textContent), never as markup; the only markup
// inserted is the SVG the server draws, parsed as SVG, with its scripts (there are none) dropped.
"use strict";
(() => {
  const KEY = "alertd-token";
  const REFRESH_MS = 5000;
  const API = "../api/v1/";
  const page = document.body.dataset.page;
  const $ = (sel, root = document) => root.querySelector(sel);

  class Unauthorized extends Error {}

  function h(tag, attrs = {}, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }

  async function api(path, opts = {}) {
    const headers = Object.assign({}, opts.headers || {});
    const token = sessionStorage.getItem(KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const resp = await fetch(API + path, Object.assign({}, opts, { headers }));
    if (resp.status === 401) {
      sessionStorage.removeItem(KEY);
      throw new Unauthorized("a token is needed");
    }
    return resp;
  }

  async function json(path, opts) {
    const resp = await api(path, opts);
    const body = await resp.json().catch(() => null);
    if (!resp.ok) {
      const errors = body && (body.errors || (body.detail && [].concat(body.detail)));
      throw new Error((errors || ["HTTP " + resp.status]).map((e) => (typeof e === "string" ? e : JSON.stringify(e))).join("\n"));
    }
    return body;
  }

  function showLogin(message) {
    $("#content").replaceChildren();
    $("#content").classList.add("hidden");
    $("#login").classList.remove("hidden");
    $("#login-error").textContent = message || "";
    $("#token").focus();
  }

  function hideLogin() {
    $("#login").classList.add("hidden");
    $("#content").classList.remove("hidden");
  }

  function stamp(text) {
    $("#status").textContent = text;
  }

  function ago(iso) {
    if (!iso) return "";
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return Math.round(s) + "s ago";
    if (s < 3600) return Math.round(s / 60) + "m ago";
    if (s < 86400) return (s / 3600).toFixed(1) + "h ago";
    return (s / 86400).toFixed(1) + "d ago";
  }

  function value(v) {
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(6).replace(/\.?0+(e|$)/, "$1");
    return v === null || v === undefined ? "" : String(v);
  }

  function runLink(source, run, title) {
    const q = new URLSearchParams({ source: source || "", run: run || "" });
    return h("a", { href: "run?" + q.toString() }, title || run);
  }

  // how a run is shown: its label, or the name /runs gives it (a TensorBoard logdir's root run "." by the logdir's name)
  function runTitles(runs) {
    const out = new Map();
    for (const r of runs) out.set(r.source + "\u0000" + r.run, r.title || r.run);
    return (source, run) => out.get((source || "") + "\u0000" + run) || run;
  }

  function table(headers, rows, empty) {
    if (!rows.length) return h("p", { class: "empty" }, empty);
    return h(
      "div",
      { class: "wrap" },
      h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))), h("tbody", {}, rows))
    );
  }

  function svgNode(text) {
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const svg = doc.documentElement;
    if (svg.nodeName !== "svg") return h("p", { class: "error" }, "the chart could not be read");
    for (const s of svg.querySelectorAll("script,foreignObject")) s.remove();
    return document.importNode(svg, true);
  }

  function silenceHref(labels) {
    return "silences#new=" + encodeURIComponent(JSON.stringify(labels));
  }

  // -- overview -------------------------------------------------------------------------------------

  function alertRows(alerts, withRun, titleOf) {
    return alerts.map((a) =>
      h(
        "tr",
        { "data-rule": a.rule, "data-state": a.state, "data-fingerprint": a.fingerprint },
        h("td", { class: "sev-" + a.severity }, a.severity),
        h("td", { class: "state-" + a.state }, a.state + (a.silenced ? " (silenced)" : "")),
        h("td", {}, a.rule),
        withRun
          ? h("td", {}, a.labels.run ? runLink(a.labels.source, a.labels.run, titleOf && titleOf(a.labels.source, a.labels.run)) : a.labels.host || "")
          : null,
        h("td", { title: a.activeAt || "" }, ago(a.activeAt)),
        h("td", {}, value(a.value)),
        h("td", {}, a.step === null ? "" : a.step),
        h("td", {}, a.annotations.summary || ""),
        h("td", {}, h("a", { href: silenceHref(Object.assign({ alertname: a.rule }, a.labels)) }, "Silence"))
      )
    );
  }

  function sourceHealth(s) {
    if (s.state === "disabled") return "disabled";
    if (s.state === "unknown") return "not read yet";
    return s.state === "up" ? "up" : `down (${s.failures} failures)`;
  }

  async function overview() {
    const [alerts, runs, sources] = await Promise.all([json("alerts?format=alertd"), json("runs"), json("sources")]);
    const order = { critical: 0, warning: 1, info: 2 };
    alerts.sort((a, b) => (order[a.severity] ?? 3) - (order[b.severity] ?? 3) || (a.state > b.state ? 1 : -1));
    $("#content").replaceChildren(
      h("h1", {}, "Overview"),
      h(
        "section",
        { id: "alerts", "aria-labelledby": "alerts-h" },
        h("h2", { id: "alerts-h" }, `Alerts (${alerts.filter((a) => a.state === "firing").length} firing, ${alerts.filter((a) => a.state === "pending").length} pending)`),
        table(["severity", "state", "rule", "run", "since", "value", "step", "summary", ""], alertRows(alerts, true, runTitles(runs)), "No alert is pending or firing.")
      ),
      h(
        "section",
        { id: "runs", "aria-labelledby": "runs-h" },
        h("h2", { id: "runs-h" }, `Runs (${runs.length})`),
        table(
          ["run", "source", "state", "last step", "last sample", "writer"],
          runs.map((r) =>
            h(
              "tr",
              { "data-run": r.run, "data-source": r.source },
              h("td", {}, runLink(r.source, r.run, r.title)),
              h("td", {}, r.source),
              h("td", { class: "state-" + r.state }, r.state + (r.reason ? " (" + r.reason + (r.exitCode !== null && r.exitCode !== undefined ? ", exit " + r.exitCode : "") + ")" : "")),
              h("td", {}, r.lastStep === null ? "" : r.lastStep),
              h("td", { title: r.lastSample || "" }, ago(r.lastSample)),
              h("td", {}, r.writer ? `pid ${r.writer.pid} on ${r.writer.host}` + (r.writer.verified ? "" : " (unverified)") : "")
            )
          ),
          "No run yet."
        )
      ),
      h(
        "section",
        { id: "sources", "aria-labelledby": "sources-h" },
        h("h2", { id: "sources-h" }, "Sources"),
        table(
          ["source", "type", "health", "last read", "samples", "last error or note"],
          sources.map((s) =>
            h(
              "tr",
              { "data-source": s.name, "data-state": s.state },
              h("td", {}, s.name),
              h("td", {}, s.type),
              h("td", { class: s.state === "down" ? "down" : s.state === "up" ? "up" : "muted" }, sourceHealth(s)),
              h("td", { title: s.lastPoll || "" }, ago(s.lastPoll)),
              h("td", {}, s.samples),
              h("td", {}, s.lastError || s.note || "")
            )
          ),
          "No source is configured."
        )
      )
    );
  }

  // -- run ------------------------------------------------------------------------------------------

  async function runPage() {
    const q = new URLSearchParams(location.search);
    const source = q.get("source") || "";
    const run = q.get("run") || "";
    const x = q.get("x") === "time" ? "time" : "step";
    const plotQ = new URLSearchParams({ source, run, x }).toString();
    const [runs, alerts, plot] = await Promise.all([
      json("runs"),
      json("alerts?format=alertd"),
      api("runs/plot.svg?" + plotQ).then(async (r) => (r.ok ? r.text() : Promise.reject(new Error(await r.text())))),
    ]);
    const info = runs.find((r) => r.run === run && r.source === source);
    const mine = alerts.filter((a) => a.labels.run === run && (a.labels.source || "") === source);
    const title = info ? info.title || run : run;
    document.title = `alertd: ${title}`;
    const axisLink = (to, text) =>
      to === x
        ? h("strong", { id: "x-" + to }, text)
        : h("a", { id: "x-" + to, href: "run?" + new URLSearchParams({ source, run, x: to }).toString() }, text);
    $("#content").replaceChildren(
      h("h1", {}, `Run ${title}`, h("span", { class: "note" }, ` (source ${source})`)),
      h(
        "section",
        { id: "run-state" },
        info
          ? h(
              "p",
              {},
              "State: ",
              h("strong", { class: "state-" + info.state, id: "run-state-value" }, info.state + (info.reason ? " (" + info.reason + ")" : "")),
              `; steps ${info.firstStep ?? "?"} to ${info.lastStep ?? "?"}; last sample ${ago(info.lastSample)}`
            )
          : h("p", { class: "empty" }, "alertd does not know this run (yet).")
      ),
      h("p", { class: "note", id: "x-axis" }, "x axis: ", axisLink("step", "step"), " | ", axisLink("time", "time")),
      h("section", { id: "chart", class: "figure", "aria-label": "charts" }, svgNode(plot)),
      h(
        "section",
        { id: "run-alerts" },
        h("h2", {}, "Alerts on this run"),
        table(["severity", "state", "rule", "since", "value", "step", "summary", ""], alertRows(mine, false), "None pending or firing.")
      ),
      h(
        "section",
        { id: "run-actions" },
        h("h2", {}, "Actions on this run"),
        table(["time", "action", "notifier", "rule", "step", "LR", "checkpoint", "what happened"], actionRows(info ? info.actions || [] : []), "No action has acted on this run.")
      )
    );
  }

  function actionRows(actions) {
    return actions
      .slice()
      .reverse() // newest first
      .map((a) =>
        h(
          "tr",
          { "data-action": a.action, "data-notifier": a.notifier, "data-refused": a.refused === null || a.refused === undefined ? "false" : "true" },
          h("td", {}, a.time ? ago(a.time) : ""),
          h("td", {}, a.action),
          h("td", {}, a.notifier),
          h("td", {}, a.rule),
          h("td", {}, a.step === null || a.step === undefined ? "" : String(a.step)),
          h("td", {}, a.old_lr !== null && a.old_lr !== undefined && a.new_lr !== null && a.new_lr !== undefined ? `${a.old_lr} -> ${a.new_lr}` : ""),
          h("td", {}, a.checkpoint || ""),
          h("td", { class: a.refused ? "state-firing" : "" }, a.summary, stackDumps(a.processes))
        )
      );
  }

  function stackDumps(processes) {
    // a `stacks` report: each process's whole dump, folded
    if (!Array.isArray(processes) || !processes.length) return null;
    return h(
      "details",
      { class: "stack-dumps" },
      h("summary", {}, `stacks of ${processes.length} process${processes.length === 1 ? "" : "es"}`),
      processes.map((p) =>
        h(
          "div",
          { "data-pid": p.pid, "data-rank": p.rank === null || p.rank === undefined ? "" : p.rank },
          h("h3", {}, `${p.rank === null || p.rank === undefined ? "" : `rank ${p.rank} `}pid ${p.pid} (${p.method})${p.truncated ? ", truncated" : ""}`),
          p.error ? h("p", {}, p.error) : null,
          p.dump ? h("pre", {}, p.dump) : null
        )
      )
    );
  }

  // -- silences -------------------------------------------------------------------------------------

  function matcherText(m) {
    const op = m.isRegex ? (m.isEqual ? "=~" : "!~") : m.isEqual ? "=" : "!=";
    return `${m.name}${op}"${m.value}"`;
  }

  function parseMatchers(text) {
    const out = [];
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (!line) continue;
      const m = /^([A-Za-z_][A-Za-z0-9_.]*)\s*(=~|!~|!=|=)\s*(.*)$/.exec(line);
      if (!m) throw new Error(`not a matcher: ${line} (write name="value", name=~"regex", name!="value")`);
      let v = m[3].trim();
      if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
      out.push({ name: m[1], value: v, isRegex: m[2].includes("~"), isEqual: !m[2].startsWith("!") });
    }
    if (!out.length) throw new Error("give at least one matcher");
    return out;
  }

  let silenceFormDone = false;

  function silenceForm() {
    const wanted = new URLSearchParams(location.hash.slice(1)).get("new");
    let labels = {};
    try {
      labels = wanted ? JSON.parse(wanted) : {};
    } catch (e) {
      labels = {};
    }
    const keep = ["alertname", "source", "run", "metric", "host", "gpu", "slurm_job_id"];
    const lines = Object.entries(labels)
      .filter(([k]) => keep.includes(k))
      .map(([k, v]) => `${k}="${v}"`)
      .join("\n");
    const form = h(
      "form",
      { id: "new-silence" },
      h("label", { for: "matchers" }, "Matchers (one a line)"),
      h("textarea", { id: "matchers", name: "matchers", rows: 5, style: "min-height:90px" }, lines),
      h(
        "div",
        { class: "row" },
        h("div", {}, h("label", { for: "duration" }, "Duration"), h("input", { id: "duration", value: "2h", size: 8 })),
        h("div", {}, h("label", { for: "created-by" }, "Created by"), h("input", { id: "created-by", value: "web page" })),
        h("div", { style: "flex:1" }, h("label", { for: "comment" }, "Comment"), h("input", { id: "comment", style: "width:100%" }))
      ),
      h("p", {}, h("button", { class: "primary", type: "submit" }, "Create silence")),
      h("p", { id: "silence-error", class: "error", role: "alert" })
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      $("#silence-error").textContent = "";
      try {
        const body = {
          matchers: parseMatchers($("#matchers").value),
          duration: $("#duration").value,
          createdBy: $("#created-by").value,
          comment: $("#comment").value,
        };
        const made = await json("silences", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        history.replaceState(null, "", "silences");
        $("#silence-error").textContent = "";
        stamp("silence " + made.id + " created");
        silenceFormDone = true;
        await refresh();
      } catch (e) {
        if (e instanceof Unauthorized) return showLogin();
        $("#silence-error").textContent = e.message;
      }
    });
    return form;
  }

  async function silencesPage() {
    const silences = await json("silences");
    silences.sort((a, b) => (a.status.state === "expired") - (b.status.state === "expired") || (a.endsAt < b.endsAt ? 1 : -1));
    const list = table(
      ["matchers", "status", "starts", "ends", "created by", "comment", ""],
      silences.map((s) =>
        h(
          "tr",
          { "data-silence": s.id },
          h("td", {}, h("code", {}, s.matchers.map(matcherText).join(", "))),
          h("td", { class: "status-" + s.status.state }, s.status.state),
          h("td", {}, s.startsAt),
          h("td", {}, s.endsAt),
          h("td", {}, s.createdBy),
          h("td", {}, s.comment),
          h(
            "td",
            {},
            s.status.state === "expired"
              ? ""
              : h(
                  "button",
                  {
                    type: "button",
                    onclick: async () => {
                      try {
                        await json("silences/" + encodeURIComponent(s.id), { method: "DELETE" });
                        await refresh();
                      } catch (e) {
                        if (e instanceof Unauthorized) return showLogin();
                        stamp(e.message);
                      }
                    },
                  },
                  "Expire"
                )
          )
        )
      ),
      "No silence."
    );
    const existing = $("#new-silence");
    const form = existing && silenceFormDone === false ? existing : silenceForm();
    silenceFormDone = false;
    $("#content").replaceChildren(
      h("h1", {}, "Silences"),
      h("section", { id: "silence-new" }, h("h2", {}, "New silence"), form),
      h("section", { id: "silence-list" }, h("h2", {}, "All silences"), list)
    );
  }

  // -- dry-run --------------------------------------------------------------------------------------

  const STARTER = `rules:
  - name: loss_not_finite
    metric: ["*loss"]
    condition: nonfinite
    severity: critical
  - name: loss_spike
    metric: ["*loss"]
    condition: {spike: {ratio: 2.0, baseline: 50 samples, stat: median}}
    severity: warning
`;

  async function dryRunPage() {
    if ($("#dry-form")) return; // built once: it is not refreshed
    let listing = { roots: [], sources: [] };
    try {
      listing = await json("dry-run/sources");
    } catch (e) {
      if (e instanceof Unauthorized) throw e;
    }
    const options = listing.sources.map((s) => h("option", { value: JSON.stringify({ type: s.type, path: s.path }) }, `${s.type}: ${s.path}`));
    const form = h(
      "form",
      { id: "dry-form" },
      h("label", { for: "rules" }, "Rules (YAML)"),
      h("textarea", { id: "rules", spellcheck: "false" }, STARTER),
      h("label", { for: "source" }, "Recorded run"),
      options.length
        ? h("select", { id: "source" }, options)
        : h("p", { class: "empty", id: "source" }, listing.roots.length ? "Nothing readable under " + listing.roots.join(", ") : "The server allows no directory (set ALERTD_DRY_RUN_ROOTS)."),
      h("p", {}, h("button", { class: "primary", type: "submit", id: "dry-run-go" }, "Run")),
      h("p", { id: "dry-error", class: "error", role: "alert" })
    );
    const out = h("div", { id: "dry-result", "aria-live": "polite" });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      $("#dry-error").textContent = "";
      const sel = $("select#source");
      if (!sel) {
        $("#dry-error").textContent = "no recorded run to replay";
        return;
      }
      const button = $("#dry-run-go");
      button.disabled = true;
      out.replaceChildren(h("p", { class: "note" }, "running..."));
      try {
        const body = { rules: $("#rules").value, source: JSON.parse(sel.value), plot: true };
        const res = await json("dry-run", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        const rows = res.transitions.map((t) =>
          h(
            "tr",
            { "data-rule": t.rule, "data-state": t.state, "data-step": t.step === null ? "" : t.step },
            h("td", {}, t.time),
            h("td", { class: "state-" + t.state }, t.state),
            h("td", {}, t.rule),
            h("td", {}, t.labels.run || ""),
            h("td", {}, t.labels.metric || ""),
            h("td", {}, t.step === null ? "" : t.step),
            h("td", {}, value(t.value))
          )
        );
        const recoveries = (res.recoveries || []).map((r) =>
          h(
            "tr",
            {
              "data-notifier": r.notifier,
              "data-rule": r.rule,
              "data-step": r.step === null ? "" : r.step,
              "data-checkpoint-step": r.plan ? r.plan.checkpoint_step : "",
              "data-outcome": r.plan ? "plan" : r.give_up ? "gave_up" : "refused",
            },
            h("td", {}, r.time),
            h("td", {}, r.run),
            h("td", {}, r.rule),
            h("td", {}, r.step === null ? "" : r.step),
            h("td", {}, r.notifier),
            h("td", { class: r.plan ? "" : "state-firing" }, r.summary || r.refused || "")
          )
        );
        out.replaceChildren(
          h("p", {}, `${res.samples} samples replayed, ${res.transitions.length} transitions.`),
          ...(res.plots || []).map((p) => h("section", { class: "figure", "data-run": p.run }, svgNode(p.svg))),
          ...(recoveries.length
            ? [h("section", { id: "dry-recoveries" }, h("h2", {}, "Recoveries"), h("p", { class: "note" }, "What each recover notifier would have done: the checkpoint gone back to (dashed line on the chart) and the updates skipped (shaded)."), table(["time", "run", "rule", "step", "notifier", "plan"], recoveries, ""))]
            : []),
          h("section", {}, h("h2", {}, "Transitions"), table(["time", "state", "rule", "run", "metric", "step", "value"], rows, "No rule fired or was pending."))
        );
      } catch (e) {
        if (e instanceof Unauthorized) return showLogin();
        out.replaceChildren();
        $("#dry-error").textContent = e.message;
      } finally {
        button.disabled = false;
      }
    });
    $("#content").replaceChildren(
      h("h1", {}, "Dry run"),
      h("p", { class: "note" }, "Replays a recorded run through these rules: where each would have been pending and firing. Nothing is sent."),
      h("section", {}, form),
      out
    );
  }

  // -- plumbing -------------------------------------------------------------------------------------

  const PAGES = { overview, run: runPage, silences: silencesPage, dryrun: dryRunPage };
  let timer = null;
  let tried = false; // a token was just typed in

  async function refresh() {
    try {
      await PAGES[page]();
      tried = false;
      hideLogin();
      stamp("updated " + new Date().toLocaleTimeString());
    } catch (e) {
      if (e instanceof Unauthorized) {
        showLogin(tried ? "that token was refused" : "");
        tried = false;
        return false;
      }
      stamp("error: " + e.message);
    }
    return true;
  }

  async function start() {
    clearInterval(timer);
    if ((await refresh()) === false) return;
    if (page !== "dryrun") timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  }

  $("#login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("#token").value.trim();
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    $("#token").value = "";
    tried = true;
    start();
  });
  window.addEventListener("hashchange", () => { if (page === "silences") { silenceFormDone = true; refresh(); } });
  start();
})();
