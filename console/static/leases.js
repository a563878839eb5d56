// The Leases, locks and elections page: live leases a page at a time with their TTLs
// counting down (the pages shown are re-read every 5 s while they are 5 at most; "more"
// reads only the next), and the locks and elections under a prefix with their holders and
// fencing tokens.
"use strict";
(() => {
  const {api, el, say} = ML;
  const REFRESH_MS = 5000;
  const REFRESH_PAGES = 5;   // beyond 500 leases shown the TTLs only count down (no re-read)
  let pages = [];          // the lease cursors of the pages shown ("" = the first)
  let leaseNext = null;
  let lockCursor = null;
  let lockShown = 0;

  function leaseRow(l, readAt) {
    return el("tr", {"data-lease": l.id},
      el("td", {}, l.id),
      el("td", {class: "num"}, `${l.granted_ttl} s`),
      el("td", {class: "num ttl", "data-ttl": l.ttl, "data-read": readAt}, l.expired ? "expired" : `${l.ttl} s`),
      el("td", {class: "num keys"}, l.keys),
      el("td", {class: "muted"}, l.first_keys.join(", ") + (l.keys > l.first_keys.length ? ", …" : "")));
  }

  // Read the pages shown again (append: only the last one, just added).
  async function leasesLoad(append) {
    const body = document.querySelector("#leases tbody");
    const rows = [];
    let total = 0;
    let next = null;
    for (const cursor of append ? pages.slice(-1) : pages) {
      const q = {limit: 100};
      if (cursor) q.cursor = cursor;
      const r = await api("/api/leases", q);
      const readAt = performance.now();
      total = r.total;
      rows.push(...r.leases.map((l) => leaseRow(l, readAt)));
      next = r.next;
      if (!next) break;
    }
    if (append) body.append(...rows); else body.replaceChildren(...rows);
    leaseNext = next;
    document.getElementById("ltotal").textContent = `(${total} live, ${body.children.length} shown)`;
    document.getElementById("lmore").hidden = !leaseNext;
  }

  function countDown() {
    const now = performance.now();
    for (const td of document.querySelectorAll("#leases td.ttl")) {
      const ttl = Number(td.dataset.ttl);
      if (ttl < 0) continue;
      td.textContent = `${Math.max(0, ttl - Math.floor((now - Number(td.dataset.read)) / 1000))} s`;
    }
  }

  function lockRow(k) {
    return el("tr", {"data-name": k.name},
      el("td", {}, k.name),
      el("td", {}, k.holder_key),
      el("td", {}, k.lease),
      el("td", {class: "num token"}, k.token),
      el("td", {class: "value"}, k.value),
      el("td", {class: "num", title: k.waiting.map((w) => w.key).join("\n")}, k.waiters));
  }

  async function locks(more = false) {
    const body = document.querySelector("#locks tbody");
    if (!more) { body.replaceChildren(); lockCursor = null; }
    const mine = ++lockShown;
    try {
      const q = {prefix: document.getElementById("lprefix").value, limit: 50};
      if (lockCursor) q.cursor = lockCursor;
      const r = await api("/api/locks", q);
      if (mine !== lockShown) return;
      body.append(...r.locks.map(lockRow));
      lockCursor = r.next;
      document.getElementById("kmore").hidden = !lockCursor;
      document.getElementById("kscanned").textContent =
        `${r.scanned} keys read${lockCursor ? " (more to read)" : ""}`;
    } catch (e) { say("message", e.message); }
  }

  async function refresh(append = false) {
    if (!append && pages.length > REFRESH_PAGES) return;
    try { await leasesLoad(append); say("message", ""); } catch (e) { say("message", e.message); }
  }

  document.getElementById("lmore").addEventListener("click", () => { pages.push(leaseNext); refresh(true); });
  document.getElementById("kmore").addEventListener("click", () => locks(true));
  document.getElementById("lockform").addEventListener("submit", (ev) => { ev.preventDefault(); locks(); });

  ML.init("/leases").then(() => {
    document.getElementById("lprefix").value = new URLSearchParams(location.search).get("prefix") || "";
    pages = [""];
    refresh();
    locks();
    setInterval(refresh, REFRESH_MS);
    setInterval(countDown, 1000);
  }).catch((e) => say("message", e.message));
})();
