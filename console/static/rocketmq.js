// The RocketMQ page: topics a page at a time with their routes (only the page's routes are
// read), a topic's queues with their min/max offsets from its masters, the replica groups
// and brokers metaledger holds, the consumer groups of the brokers a page at a time, a
// group's lag per queue (in messages and in time) and its online clients, and message lookup
// by key or id. A broker that does not answer is named with why; its numbers are left out,
// never guessed.
"use strict";
(() => {
  const {api, el, say} = ML;
  let topicNext = null;
  let topicShown = 0;

  function topicRows(t) {
    if (!t.queues.length) return [el("tr", {"data-topic": t.topic}, el("td", {}, t.topic), el("td", {class: "muted", colspan: "5"}, "no queues"))];
    return t.queues.map((q, i) => el("tr", {"data-topic": t.topic, "data-broker": q.broker},
      el("td", {}, i ? "" : el("a", {href: "#", class: "topic", onclick: (ev) => { ev.preventDefault(); offsets(t.topic); }}, t.topic)),
      el("td", {}, q.broker),
      el("td", {class: "muted"}, Object.entries(q.addrs).map(([id, a]) => `${id}=${a}`).join(", ")),
      el("td", {class: "num"}, q.read),
      el("td", {class: "num"}, q.write),
      el("td", {class: "num"}, q.perm)));
  }

  async function topics(more = false) {
    const body = document.querySelector("#topics tbody");
    if (!more) { body.replaceChildren(); topicNext = null; }
    const mine = ++topicShown;
    try {
      const q = {q: document.getElementById("tq").value, limit: 50};
      if (document.getElementById("tsystem").checked) q.system = "1";
      if (topicNext) q.cursor = topicNext;
      const r = await api("/api/rocketmq/topics", q);
      if (mine !== topicShown) return;
      body.append(...r.topics.flatMap(topicRows));
      topicNext = r.next;
      const shown = new Set([...body.querySelectorAll("tr")].map((tr) => tr.dataset.topic)).size;
      document.getElementById("ttotal").textContent = `(${r.total} topics, ${shown} shown)`;
      document.getElementById("tmore").hidden = !topicNext;
    } catch (e) { say("message", e.message); }
  }

  async function offsets(topic) {
    document.getElementById("qtopic").textContent = topic;
    const body = document.querySelector("#queues tbody");
    const errs = document.getElementById("qerrors");
    try {
      const r = await api("/api/rocketmq/offsets", {topic});
      const rows = [];
      const errors = [];
      for (const b of r.brokers) {
        if (b.error) { errors.push(b.error); rows.push(el("tr", {"data-broker": b.broker}, el("td", {}, b.broker), el("td", {}, b.addr || "-"), el("td", {class: "down", colspan: "4"}, "no answer"))); continue; }
        for (const q of b.queues) {
          rows.push(el("tr", {"data-broker": b.broker, "data-queue": q.queue},
            el("td", {}, b.broker), el("td", {class: "muted"}, b.addr), el("td", {class: "num"}, q.queue),
            el("td", {class: "num min"}, q.min), el("td", {class: "num max"}, q.max), el("td", {class: "num"}, q.max - q.min)));
        }
      }
      body.replaceChildren(...rows);
      errs.textContent = errors.join("; ");
    } catch (e) { say("message", e.message); }
  }

  async function brokers() {
    try {
      const r = await api("/api/rocketmq/brokers");
      document.querySelector("#brokers tbody").replaceChildren(...r.brokers.map((b) => el("tr", {"data-addr": b.addr},
        el("td", {}, b.cluster), el("td", {}, b.broker), el("td", {class: "num"}, b.id), el("td", {}, b.addr),
        el("td", {class: "muted"}, b.ha_addr || "-"), el("td", {class: "num"}, `${b.timeout_ms / 1000} s`))));
      document.querySelector("#groups tbody").replaceChildren(...r.groups.map((g) => el("tr", {"data-group": g.group},
        el("td", {}, g.group), el("td", {}, g.cluster),
        el("td", {}, g.master_id ? `${g.master_id} ${g.master_address}` : "none"),
        el("td", {class: "num"}, g.master_epoch),
        el("td", {}, g.in_sync.join(",") || "-"),
        el("td", {class: "num"}, g.in_sync_epoch),
        el("td", {}, `${g.policy.total_replicas} / ${g.policy.in_sync_replicas} / ${g.policy.min_in_sync_replicas}${g.policy.auto_in_sync ? " auto" : ""}`),
        el("td", {}, ...g.replicas.map((x) => el("div", {class: x.alive ? "" : "down"},
          `${x.id} ${x.address} ${x.role} ${x.alive ? "alive" : "down"} ${x.in_sync ? "in sync" : "not in sync"}`))),
        el("td", {class: "num", title: g.acked_error || ""}, ...(g.acked_error ? [el("div", {class: "down"}, "master not asked: " + g.acked_error)] :
          g.replicas.map((x) => el("div", {}, `${x.id}=${x.acked === null ? "-" : x.acked}`)))))));
    } catch (e) { say("message", e.message); }
  }

  function when(ms) { return ms > 0 ? new Date(ms).toISOString().replace(/\.\d+Z$/, "Z") : "-"; }

  // a lag in time as `metaledger consumer lag` prints it (cut, not rounded): 0, 850ms, 12.3s,
  // 4m05s, 2h03m
  function lagTime(ms) {
    if (ms < 1000) return ms ? `${ms}ms` : "0";
    if (ms < 60000) return `${Math.floor(ms / 1000)}.${Math.floor(ms / 100) % 10}s`;
    const s = Math.floor(ms / 1000);
    const pad = (n) => String(n).padStart(2, "0");
    if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
    return `${Math.floor(s / 3600)}h${pad(Math.floor(s / 60) % 60)}m`;
  }

  let groupNext = null;
  let groupShown = 0;

  async function groups(more = false) {
    const body = document.querySelector("#cgroups tbody");
    if (!more) { body.replaceChildren(); groupNext = null; }
    const mine = ++groupShown;
    try {
      const q = {q: document.getElementById("gq").value, limit: 50};
      if (groupNext) q.cursor = groupNext;
      const r = await api("/api/rocketmq/groups", q);
      if (mine !== groupShown) return;
      body.append(...r.groups.map((g) => el("tr", {"data-group": g.group},
        el("td", {}, el("a", {href: "#", class: "group", onclick: (ev) => { ev.preventDefault(); pick(g.group); }}, g.group)),
        el("td", {}, g.brokers.join(", ")), el("td", {class: "num lag"}, g.lag), el("td", {class: "num"}, g.inflight),
        el("td", {class: "num"}, lagTime(g.lag_ms)), el("td", {class: "num"}, g.clients),
        el("td", {class: g.errors.length ? "down" : "muted"}, g.errors.length ? g.errors.join("; ") : g.protocols.join(", ") || "-"))));
      groupNext = r.next;
      document.getElementById("gtotal").textContent = `(${r.total} groups, ${body.children.length} shown, ${r.masters.length} masters asked)`;
      document.getElementById("gmore").hidden = !groupNext;
      document.getElementById("gerrors").textContent = r.errors.join("; ");
    } catch (e) { say("message", e.message); }
  }

  function pick(group) {
    document.getElementById("lgroup").value = group;
    document.getElementById("ltopic").value = "";
    lag();
  }

  async function clients(group) {
    document.getElementById("cgroup").textContent = group;
    try {
      const r = await api("/api/rocketmq/clients", {group});
      document.querySelector("#clients tbody").replaceChildren(...r.clients.map((c) => el("tr", {"data-client": c.client_id},
        el("td", {}, c.client_id), el("td", {}, c.address), el("td", {}, c.language), el("td", {}, c.protocol),
        el("td", {}, c.version), el("td", {class: "muted"}, c.brokers.join(", ")))));
      const topics = r.topics.length ? `, subscribed to ${r.topics.join(", ")}` : "";
      document.getElementById("ckind").textContent = r.clients.length ? `(${r.clients.length} online: ${r.consume_types.join(", ")}${topics})` : "(nobody online)";
      document.getElementById("cerrors").textContent = r.errors.join("; ");
    } catch (e) { say("message", e.message); }
  }

  async function producers() {
    const group = document.getElementById("pgroup").value.trim();
    const body = document.querySelector("#producers tbody");
    body.replaceChildren();
    document.getElementById("pkind").textContent = "";
    if (!group) { document.getElementById("perrors").textContent = "give a producer group"; return; }
    try {
      const r = await api("/api/rocketmq/producers", {group});
      body.replaceChildren(...r.producers.map((c) => el("tr", {"data-client": c.client_id},
        el("td", {}, c.client_id), el("td", {}, c.address), el("td", {}, c.language), el("td", {}, c.protocol),
        el("td", {}, c.version), el("td", {class: "muted"}, c.brokers.join(", ")))));
      document.getElementById("pkind").textContent = `of ${group}: ${r.producers.length ? r.producers.length + " online" : "nobody online"}`;
      document.getElementById("perrors").textContent = r.errors.join("; ");
    } catch (e) { document.getElementById("perrors").textContent = e.message; }
  }

  async function lookup() {
    const box = document.getElementById("merror");
    const body = document.querySelector("#msgs tbody");
    const what = document.getElementById("mwhat").value.trim();
    const q = {topic: document.getElementById("mtopic").value.trim()};
    q[document.getElementById("mby").value] = what;
    body.replaceChildren();
    box.textContent = "";
    if (!what) { box.textContent = "give a message id or a key"; return; }
    try {
      const r = await api("/api/rocketmq/message", q);
      body.replaceChildren(...r.messages.map((m) => el("tr", {"data-msgid": m.msg_id},
        el("td", {}, m.msg_id), el("td", {}, m.uniq_key || "-"), el("td", {}, m.topic), el("td", {class: "num"}, m.queue),
        el("td", {class: "num"}, m.queue_offset), el("td", {}, m.keys || "-"), el("td", {}, m.tags || "-"),
        el("td", {class: "muted"}, when(m.store_timestamp)), el("td", {class: "muted"}, m.store_host),
        el("td", {class: "body", title: JSON.stringify(m.properties)}, m.body !== null ? m.body : `0x${m.body_hex}`))));
      box.textContent = r.errors.join("; ");
    } catch (e) { box.textContent = e.message; }
  }

  async function lag() {
    const group = document.getElementById("lgroup").value;
    if (!group) return;
    try {
      const r = await api("/api/rocketmq/lag", {group, topic: document.getElementById("ltopic").value});
      document.querySelector("#lag tbody").replaceChildren(...r.queues.map((q) => el("tr", {"data-topic": q.topic, "data-broker": q.broker, "data-queue": q.queue},
        el("td", {}, q.broker), el("td", {}, q.topic), el("td", {class: "num"}, q.queue),
        el("td", {class: "num"}, q.broker_offset), el("td", {class: "num"}, q.consumer_offset),
        el("td", {class: "num"}, q.inflight), el("td", {class: "num lag"}, q.lag), el("td", {class: "num"}, lagTime(q.lag_ms)),
        el("td", {class: "muted"}, when(q.next_timestamp)), el("td", {class: "muted"}, when(q.last_timestamp)))));
      document.getElementById("ltotal").textContent = `total lag ${r.lag}, in flight ${r.inflight}, lag time ${lagTime(r.lag_ms)} (${r.masters.length} masters asked)`;
      document.getElementById("lerrors").textContent = r.errors.join("; ");
      say("message", "");
    } catch (e) { say("message", e.message); }
    clients(group);
  }

  document.getElementById("tform").addEventListener("submit", (ev) => { ev.preventDefault(); topics(); });
  document.getElementById("tmore").addEventListener("click", () => topics(true));
  document.getElementById("gform").addEventListener("submit", (ev) => { ev.preventDefault(); groups(); });
  document.getElementById("gmore").addEventListener("click", () => groups(true));
  document.getElementById("mform").addEventListener("submit", (ev) => { ev.preventDefault(); lookup(); });
  document.getElementById("pform").addEventListener("submit", (ev) => { ev.preventDefault(); producers(); });
  document.getElementById("lform").addEventListener("submit", (ev) => { ev.preventDefault(); lag(); });

  ML.init("/rocketmq").then(() => {
    const p = new URLSearchParams(location.search);
    document.getElementById("lgroup").value = p.get("group") || "";
    document.getElementById("ltopic").value = p.get("topic") || "";
    topics();
    brokers();
    if (p.get("topic")) offsets(p.get("topic"));
    groups();
    lag();
    if (p.get("producer")) {
      document.getElementById("pgroup").value = p.get("producer");
      producers();
    }
    for (const by of ["id", "key"]) {
      if (!p.get(by)) continue;
      document.getElementById("mby").value = by;
      document.getElementById("mwhat").value = p.get(by);
      document.getElementById("mtopic").value = p.get("topic") || "";
      lookup();
    }
  }).catch((e) => say("message", e.message));
})();
