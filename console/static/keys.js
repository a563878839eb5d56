// The Keys page: a paged prefix tree, search by key or value, a value viewer with its
// history, and (when the console allows writes) edits confirmed by naming the key.
"use strict";
(() => {
  const {api, el, say} = ML;
  let prefix = new URLSearchParams(location.search).get("prefix") || "";
  let cursor = null;
  let current = null;   // the value shown
  let view = "text";
  let shown = 0;        // the listing or search whose answer may fill the list (older ones drop)

  function entryItem(e, onclick) {
    return el("li", {class: e.dir ? "dir" : "key", "data-key": e.key, onclick}, e.name || "(this prefix)");
  }

  async function list(more = false) {
    say("message", "");
    document.getElementById("prefix").textContent = prefix || "(all keys)";
    exportLink();
    const ul = document.getElementById("entries");
    if (!more) { ul.replaceChildren(); cursor = null; }
    const mine = ++shown;
    try {
      const q = {prefix, limit: 100};
      if (cursor) q.cursor = cursor;
      const r = await api("/api/keys/list", q);
      if (mine !== shown) return;
      for (const e of r.entries) {
        ul.append(entryItem(e, () => e.dir ? (prefix = e.key, list()) : show(e.key_hex)));
      }
      cursor = r.next;
      document.getElementById("more").hidden = !cursor;
    } catch (e) { say("message", e.message); }
  }

  async function search(more = false) {
    const q = document.getElementById("q").value;
    const ul = document.getElementById("entries");
    if (!more) { ul.replaceChildren(); cursor = null; }
    const mine = ++shown;
    try {
      const query = {prefix, q, by: document.getElementById("by").value};
      if (cursor) query.cursor = cursor;
      const r = await api("/api/keys/search", query);
      if (mine !== shown) return;
      for (const m of r.matches) {
        const li = entryItem(m, () => show(m.key_hex));
        if (m.snippet) li.append(el("span", {class: "muted"}, ` …${m.snippet}…`));
        ul.append(li);
      }
      cursor = r.next;
      const btn = document.getElementById("more");
      btn.hidden = !cursor;
      btn.dataset.mode = "search";
      if (!r.matches.length && !more) say("message", `no match in ${r.scanned} keys${cursor ? " (more to scan)" : ""}`, "warn");
    } catch (e) { say("message", e.message); }
  }

  function renderValue() {
    const body = document.getElementById("vbody");
    for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("on", b.dataset.view === view);
    if (view === "json") body.textContent = current.json ?? "(not JSON)";
    else if (view === "hex") body.textContent = current.hex + (current.hex_truncated ? "\n…" : "");
    else body.textContent = current.text ?? "(not UTF-8 text: see hex)";
  }

  async function show(keyHex, revision = 0) {
    say("message", "");
    try {
      current = await api("/api/keys/value", {key_hex: keyHex, revision});
    } catch (e) { say("message", e.message); return; }
    document.getElementById("viewer").hidden = false;
    document.getElementById("diff").hidden = true;
    document.getElementById("vkey").textContent = current.key;
    document.getElementById("vmeta").textContent =
      `revision ${current.mod_revision} (created ${current.create_revision}), version ${current.version}, ` +
      `${current.size} bytes${current.lease ? `, lease ${current.lease}` : ""}`;
    view = current.json ? "json" : current.text !== null ? "text" : "hex";
    renderValue();
    document.getElementById("editor").hidden = !ML.allowWrites;
    document.getElementById("newvalue").value = current.text ?? "";
    if (!revision) await history(keyHex);
  }

  async function history(keyHex) {
    const tbody = document.querySelector("#history tbody");
    tbody.replaceChildren();
    try {
      const h = await api("/api/keys/history", {key_hex: keyHex});
      for (const v of h.versions) {
        tbody.append(el("tr", {onclick: () => show(keyHex, v.mod_revision)},
          el("td", {class: "num"}, v.version), el("td", {class: "num"}, v.mod_revision),
          el("td", {class: "num"}, v.size), el("td", {}, v.preview),
          el("td", {}, el("button", {type: "button", class: "diffnow", onclick: (ev) => {
            ev.stopPropagation();
            document.getElementById("dfrom").value = v.mod_revision;
            document.getElementById("dto").value = "";
            diff();
          }}, "diff with now"))));
      }
      document.getElementById("hend").textContent = `(${h.end})`;
    } catch (e) { say("message", e.message); }
  }

  async function diff() {
    const box = document.getElementById("diff");
    try {
      const d = await api("/api/keys/diff", {key_hex: current.key_hex,
        from: document.getElementById("dfrom").value, to: document.getElementById("dto").value || 0});
      box.replaceChildren(...(d.same ? [el("span", {class: "muted"}, "(the same value)")] : d.lines.map((line) =>
        el("div", {class: line.startsWith("+") && !line.startsWith("+++") ? "add"
          : line.startsWith("-") && !line.startsWith("---") ? "del" : ""}, line))));
      if (d.truncated) box.append(el("div", {class: "muted"}, "…"));
      box.hidden = false;
    } catch (e) { say("message", e.message); }
  }

  function exportLink() {
    const q = new URLSearchParams({prefix});
    if (ML.cluster) q.set("cluster", ML.cluster);
    document.getElementById("export").href = `/api/keys/export?${q}`;
  }

  async function importFile() {
    const file = document.getElementById("importfile").files[0];
    if (!file) { say("message", "choose an export file first"); return; }
    let doc;
    try { doc = JSON.parse(await file.text()); } catch (e) { say("message", `${file.name} is not JSON: ${e.message}`); return; }
    const n = Array.isArray(doc.kvs) ? doc.kvs.length : 0;
    if (!window.confirm(`Import ${n} keys under ${doc.prefix || "(every key)"} into cluster ${ML.cluster}? Existing values of those keys are overwritten.`)) return;
    try {
      const r = await api("/api/keys/import", {}, {document: doc, confirm: doc.prefix});
      await list();
      say("message", `imported ${r.written} keys under ${r.prefix} at revision ${r.revision}`, "ok");
    } catch (e) { say("message", `not imported: ${e.message}`); }
  }

  async function write(kind) {
    const key = current.key;
    const value = document.getElementById("newvalue").value;
    const what = kind === "put"
      ? `Change ${key} on cluster ${ML.cluster}: ${current.size} bytes → ${new TextEncoder().encode(value).length} bytes?`
      : `Delete ${key} on cluster ${ML.cluster}?`;
    if (!window.confirm(what)) return;
    try {
      const body = {key_hex: current.key_hex, confirm: key};
      if (kind === "put") body.value = value;
      const r = await api(`/api/keys/${kind}`, {}, body);
      if (kind === "put") await show(current.key_hex); else await list();
      say("message", kind === "put" ? `saved ${key} at revision ${r.revision}` : `deleted ${key}`, "ok");
    } catch (e) { say("message", `${kind === "put" ? "not saved" : "not deleted"}: ${e.message}`); }
  }

  // The live tail: a watch of one prefix kept by the console, polled every second; closed
  // by "stop", and when the page goes (a beacon; the console also ends one left unpolled).
  const TAIL_MS = 1000;
  const TAIL_ROWS = 200;
  let tail = null;   // {id, prefix, after, timer}

  function tailQuery(extra) {
    const q = new URLSearchParams(extra);
    if (ML.cluster) q.set("cluster", ML.cluster);
    return q;
  }

  async function tailPoll() {
    const t = tail;
    if (!t) return;
    try {
      const r = await api("/api/keys/tail", {id: t.id, after: t.after});
      if (tail !== t) return;
      const body = document.querySelector("#tailrows tbody");
      for (const e of r.events) {
        body.prepend(el("tr", {"data-key": e.key, "data-revision": e.revision},
          el("td", {class: "num"}, e.revision), el("td", {}, e.type), el("td", {}, e.key),
          el("td", {class: "muted"}, e.type === "DELETE" ? "" : e.value)));
      }
      while (body.rows.length > TAIL_ROWS) body.deleteRow(-1);
      t.after = r.next;
      let state = `of ${t.prefix || "(every key)"} from revision ${t.revision + 1}`;
      if (r.dropped) state += ` (${r.dropped} events missed)`;
      if (r.error) { state += `: ${r.error}`; stopTail(); }
      document.getElementById("tailstate").textContent = state;
    } catch (e) { say("message", `tail: ${e.message}`); stopTail(); }
    if (tail === t) t.timer = setTimeout(tailPoll, TAIL_MS);
  }

  async function startTail() {
    try {
      const data = await api("/api/keys/tail/open", {prefix}, {});
      tail = {id: data.id, prefix: data.prefix, revision: data.revision, after: 0, timer: null};
      document.querySelector("#tailrows tbody").replaceChildren();
      document.getElementById("tail").textContent = "stop the tail";
      document.getElementById("tail").dataset.tail = tail.id;
      document.getElementById("tailstate").textContent = `of ${tail.prefix || "(every key)"} from revision ${tail.revision + 1}`;
      tailPoll();
    } catch (e) { say("message", `tail: ${e.message}`); }
  }

  function stopTail() {
    const t = tail;
    tail = null;
    document.getElementById("tail").textContent = "tail this prefix";
    delete document.getElementById("tail").dataset.tail;
    if (!t) return;
    clearTimeout(t.timer);
    navigator.sendBeacon(`/api/keys/tail/close?${tailQuery({id: t.id})}`);
  }

  document.getElementById("tail").addEventListener("click", () => tail ? stopTail() : startTail());
  window.addEventListener("pagehide", stopTail);
  document.getElementById("search").addEventListener("submit", ev => { ev.preventDefault(); search(); });
  document.getElementById("more").addEventListener("click", ev => ev.target.dataset.mode === "search" ? search(true) : list(true));
  document.getElementById("up").addEventListener("click", () => {
    const parts = prefix.split("/");
    parts.splice(-2, 2);
    prefix = parts.length ? parts.join("/") + "/" : "";
    document.getElementById("more").dataset.mode = "";
    list();
  });
  for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => { view = b.dataset.view; renderValue(); });
  document.getElementById("save").addEventListener("click", () => write("put"));
  document.getElementById("diffform").addEventListener("submit", (ev) => { ev.preventDefault(); diff(); });
  document.getElementById("import").addEventListener("click", importFile);
  document.getElementById("delete").addEventListener("click", () => write("delete"));
  ML.init("/keys").then(() => {
    document.getElementById("importer").hidden = !ML.allowWrites;
    list();
  }).catch(e => say("message", `The console could not start: ${e.message}`));
})();
