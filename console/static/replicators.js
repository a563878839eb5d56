// The Replicators page: every Redis and RocketMQ job from the records its workers keep in
// metaledger (statuses, members, claims, elections), re-read every 2 seconds.
"use strict";
(() => {
  const {api, el, say} = ML;
  const REFRESH_MS = 2000;

  const dash = (v) => (v === null || v === undefined || v === "" ? "-" : v);
  const num = (v) => el("td", {class: "num"}, dash(v));

  function workers(j) {
    const td = el("td", {class: "workers"});
    j.workers.forEach((w, i) => {
      if (i) td.append(", ");
      td.append(el("span", {class: w.active ? "leader" : "", title: w.lease ? `lease ${w.lease}` : ""}, w.name));
    });
    if (!j.workers.length) td.append("-");
    return td;
  }

  function jobRow(j) {
    return el("tr", {"data-job": `${j.kind}/${j.job}`},
      el("td", {}, j.kind), el("td", {}, j.job), workers(j),
      el("td", {}, dash(j.source)), el("td", {}, dash(j.destination)),
      num(j.lag_bytes), num(j.lag_messages), num(j.lag_s), num(j.in_flight),
      num(j.rtt_ms === null ? null : `${j.rtt_ms} ms`), num(j.age_s === null ? null : `${j.age_s} s`),
      el("td", {class: j.alarms.length ? "down alarms" : "alarms"}, j.alarms.length ? j.alarms.join("; ") : "none"));
  }

  async function load() {
    try {
      const r = await api("/api/replicators");
      say("message", r.jobs.length ? "" : "no replicator job keeps records in this cluster", "warn");
      if (r.truncated) say("message", "more replicator records than the page reads: some jobs may be missing", "warn");
      document.getElementById("rrev").textContent = `(read at revision ${r.revision})`;
      document.querySelector("#jobs tbody").replaceChildren(...r.jobs.map(jobRow));
      const queues = [];
      for (const j of r.jobs) {
        for (const q of j.queues) {
          queues.push(el("tr", {"data-queue": `${j.job}/${q.partition}`},
            el("td", {}, j.job), el("td", {}, q.partition), el("td", {}, dash(q.worker)),
            el("td", {}, dash(q.dest_topic)), num(q.max_offset), num(q.pulled_offset),
            num(q.committed_offset), num(q.lag_messages), num(q.lag_s), num(q.in_flight),
            num(q.sent), num(q.acked)));
        }
      }
      document.querySelector("#queues tbody").replaceChildren(...queues);
      document.querySelector("#offsets tbody").replaceChildren(...r.jobs.filter((j) => j.kind === "redis").map((j) =>
        el("tr", {"data-job": j.job}, el("td", {}, j.job), el("td", {}, dash(j.phase)),
          num(j.offsets.parsed_offset), num(j.offsets.confirmed_offset), num(j.offsets.acked_offset),
          num(j.offsets.checkpoint_offset), num(j.sent), num(j.confirmed))));
    } catch (e) { say("message", e.message); }
    setTimeout(load, REFRESH_MS);
  }

  ML.init("/replicators").then(load).catch(e => say("message", `The console could not start: ${e.message}`));
})();
