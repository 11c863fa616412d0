// The dashboard's page: draws each picture the server sends on /events (server-sent events). No library,
// no build step; text goes in through textContent only. What changed since the last picture is marked.
"use strict";

const token = new URLSearchParams(location.search).get("token");
const WORDS = { ok: "ok", degraded: "degraded", down: "down", unknown: "unknown" };

// What was shown last (key -> value), and when each key last changed.
let shown = null;
const changedAt = new Map();
const FRESH_MS = 8000;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A state: a shape and a colour (CSS), and a word.
function st(health, word, small) {
  return h("span", { class: `st st-${health}${small ? " small" : ""}` }, h("i"), word || WORDS[health]);
}

// Marks `el` as just changed when `value` differs from the last picture's value under `key`.
function track(el, key, value, seen) {
  seen.set(key, value);
  if (shown && shown.get(key) !== value) changedAt.set(key, Date.now());
  const at = changedAt.get(key);
  if (at && Date.now() - at < FRESH_MS) {
    el.classList.add("fresh");
    el.style.animationDelay = `-${Date.now() - at}ms`;
  }
  return el;
}

function clusterCard(c, role, extra) {
  return h("div", { class: `card ${role}`, "data-cluster": c.name },
    h("h3", {}, c.name, st(c.health)),
    h("div", { class: "sub" }, `${role} · ${c.provider} · ${c.detail}`),
    extra);
}

function spokeCard(s, seen) {
  const props = h("div", { class: "kv" });
  for (const p of s.properties) {
    const key = `spoke/${s.cluster.name}/${p.name}`;
    props.append(
      h("span", { class: "k" }, p.name),
      track(h("span", { class: "v" }, p.value), key, p.value, seen),
      st(p.inClaims ? "ok" : "down", p.inClaims ? "on hub" : "not on hub", true));
  }
  return clusterCard(s.cluster, "spoke", [
    h("div", { class: "line" }, h("span", { class: "label" }, "ManagedCluster"), st(s.managed, s.managedDetail)),
    s.addons.length ? h("div", { class: "line" }, h("span", { class: "label" }, "addons"),
      s.addons.map((a) => track(st(a.health, a.name, true), `addon/${s.cluster.name}/${a.name}`, a.health, seen))) : null,
    s.properties.length ? h("div", { class: "line" }, h("span", { class: "label" }, "ClusterProperties on the spoke")) : null,
    s.properties.length ? props : null,
  ]);
}

function setsSection(p, seen) {
  const body = p.sets.length ? p.sets.map((s) =>
    h("div", { class: "set", "data-set": s.name },
      h("h3", {}, s.name, h("span", { class: "label" }, `(${s.selector})`)),
      track(h("div", { class: "members" }, s.members.length ? s.members.join(", ") : "no clusters"),
        `set/${s.name}`, s.members.join(","), seen),
      s.bindings.length ? s.bindings.map((b) =>
        h("div", { class: "binding" }, h("span", { class: "arrow" }, "bound to ➜"), b.namespace, " ",
          track(st(b.health, b.health === "ok" ? "Bound" : "not Bound", true), `binding/${s.name}/${b.namespace}`, b.health, seen)))
        : h("div", { class: "binding empty" }, "bound to no namespace")))
    : h("p", { class: "empty" }, "no ManagedClusterSets");
  return h("section", {}, h("h2", {}, "ManagedClusterSets and bindings"), body);
}

function profileCard(ns, c, seen) {
  const props = h("div", { class: "kv" });
  for (const p of c.properties) {
    props.append(h("span", { class: "k" }, p.name),
      track(h("span", { class: "v" }, p.value), `profile/${ns}/${c.name}/${p.name}`, p.value, seen), h("span"));
  }
  const access = c.accessProviders.length
    ? st("ok", c.accessProviders.join(", "), true) : st("down", "none", true);
  return h("div", { class: "card", "data-profile": `${ns}/${c.name}` },
    h("h3", {}, c.name, st(c.health)),
    h("div", { class: "line" }, h("span", { class: "label" }, "access providers"),
      track(access, `access/${ns}/${c.name}`, c.accessProviders.join(","), seen)),
    c.properties.length ? props : h("div", { class: "line empty" }, "no properties"));
}

function profilesSection(p, seen) {
  const body = p.namespaces.length ? p.namespaces.map((ns) =>
    h("div", { class: "ns", "data-namespace": ns.name },
      h("h3", {}, "namespace ", h("b", {}, ns.name), ns.bound ? null : st("down", "no Bound binding", true)),
      ns.profiles.length
        ? h("div", { class: "profiles" }, ns.profiles.map((c) => profileCard(ns.name, c, seen)))
        : h("p", { class: "empty" }, "no ClusterProfiles")))
    : h("p", { class: "empty" }, "the hub cannot be read");
  return h("section", {}, h("h2", {}, "ClusterProfiles, by bound namespace"), body);
}

function verificationSection(p, seen) {
  const v = p.verification;
  if (!v) return h("section", {}, h("h2", {}, "Last verification"), h("p", { class: "empty" }, "none recorded: run ocm-lab verify"));
  const head = h("tr", {}, h("th", {}, "spoke (namespace)"), v.checks.map((c) => h("th", {}, c)));
  const rows = v.rows.map((r) => h("tr", {}, h("td", {}, `${r.spoke} (${r.namespace})`),
    r.cells.map((cell, i) => h("td", {}, !cell ? "–"
      : track(cell.ok ? st("ok", "passed", true) : st("down", cell.hop || "failed", true),
        `verify/${r.spoke}/${r.namespace}/${v.checks[i]}`, cell.ok ? "ok" : cell.hop, seen)))));
  return h("section", {},
    h("h2", {}, "Last verification ", track(st(v.ok ? "ok" : "down", v.ok ? "passed" : "failed", true), "verify", v.at, seen),
      h("span", { class: "label" }, ` at ${v.at}`)),
    h("table", {}, h("thead", {}, head), h("tbody", {}, rows)));
}

function draw(p) {
  const seen = new Map();
  document.getElementById("lab").textContent = p.lab;
  document.title = `ocm-lab ${p.lab}${p.simulated ? " (SIMULATED)" : ""}`;
  document.getElementById("simulated").hidden = !p.simulated;
  const ex = document.getElementById("exercise");
  ex.hidden = !p.exercise;
  ex.replaceChildren(...(p.exercise
    ? [h("span", { class: "what" }, "Exercise running:"), track(h("span", {}, p.exercise.title), "exercise", p.exercise.name, seen)]
    : []));
  const problems = document.getElementById("problems");
  problems.hidden = p.problems.length === 0;
  problems.replaceChildren(...p.problems.map((x) => h("div", {}, st("degraded", "", true), x)));
  const clusters = h("section", {}, h("h2", {}, "Hub and spokes"),
    h("div", { class: "row" },
      clusterCard(p.hub, "hub", null),
      p.spokes.map((s) => spokeCard(s, seen)),
      p.departed.map((d) => h("div", { class: "card" }, h("h3", {}, d, st("unknown", "leaving")),
        h("div", { class: "sub" }, "left the topology: the next up deletes it")))));
  document.getElementById("app").replaceChildren(
    clusters,
    h("div", { class: "split" }, setsSection(p, seen), profilesSection(p, seen)),
    verificationSection(p, seen));
  shown = seen;
}

function live(health, word) {
  document.getElementById("live").replaceWith(h("span", { id: "live", class: `st st-${health}` }, h("i"), h("b", {}, word)));
}

const events = new EventSource(token ? `events?token=${encodeURIComponent(token)}` : "events");
events.addEventListener("picture", (e) => { draw(JSON.parse(e.data)); live("ok", "live"); });
events.addEventListener("open", () => live("ok", "live"));
events.addEventListener("error", () => live("down", "reconnecting"));
