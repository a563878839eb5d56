// Shared by the pages: the cluster selector, /api/ calls, messages. No framework, no build.
"use strict";
const ML = (() => {
  const params = new URLSearchParams(location.search);
  let cluster = params.get("cluster") || "";
  let allowWrites = false;
  let needLogin = false;   // auth is on, and neither this browser nor the console has a user

  async function api(path, query = {}, body = null) {
    const q = new URLSearchParams(query);
    if (cluster) q.set("cluster", cluster);
    const init = body === null ? {} : {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    };
    const resp = await fetch(`${path}?${q}`, init);
    let data;
    try { data = await resp.json(); } catch (e) { data = {error: `HTTP ${resp.status}`}; }
    if (!resp.ok) {
      let text = data.error || `HTTP ${resp.status}`;
      if (needLogin) text = `auth is on: log in as a metaledger user to see this cluster (${text})`;
      const err = new Error(text);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }

  function say(id, text, kind = "error") {
    const box = document.getElementById(id);
    if (!text) { box.hidden = true; box.textContent = ""; return; }
    box.hidden = false;
    box.className = `banner ${kind}`;
    box.textContent = text;
  }

  // the pages, in the header's order
  const PAGES = [["/", "Cluster"], ["/keys", "Keys"], ["/leases", "Leases & locks"], ["/users", "Users & roles"], ["/rocketmq", "RocketMQ"], ["/replicators", "Replicators"]];

  function header() {
    const h = document.querySelector("header");
    h.replaceChildren(el("strong", {}, "metaledger"),
      ...PAGES.map(([path, name]) => el("a", {"data-page": path, href: path}, name)),
      el("span", {class: "right"}, el("select", {id: "cluster"}), " ", el("span", {id: "mode"})));
  }

  async function init(page) {
    header();
    const info = await api("/api/clusters");
    allowWrites = info.allow_writes;
    if (!cluster) cluster = info.clusters[0].name;
    const sel = document.getElementById("cluster");
    for (const c of info.clusters) {
      const o = el("option", {value: c.name}, `${c.name} (${c.endpoints.join(",")})`);
      if (c.name === cluster) o.selected = true;
      sel.append(o);
    }
    sel.addEventListener("change", () => { location.search = `?cluster=${encodeURIComponent(sel.value)}`; });
    for (const a of document.querySelectorAll("header a[data-page]")) {
      a.href = `${a.dataset.page}?cluster=${encodeURIComponent(cluster)}`;
      if (a.dataset.page === page) a.classList.add("here");
    }
    document.getElementById("mode").textContent = allowWrites ? "read-write" : "read-only";
    await session();
  }

  // Who the API calls run as: the login of this browser (an HttpOnly cookie the page never
  // sees), else the console's own --user; with auth on and neither, a login form.
  async function session() {
    const right = document.querySelector("header .right");
    const box = el("span", {id: "auth"});
    right.prepend(box, " ");
    let s;
    try { s = await api("/api/session"); } catch (e) { return; }
    if (s.user) {
      box.append(`as ${s.user} `, el("button", {id: "logout", type: "button", onclick: async () => {
        await api("/api/logout", {}, {});
        location.reload();
      }}, "log out"));
      return;
    }
    if (!s.auth_enabled) return;
    const user = el("input", {id: "login-user", placeholder: "user", size: "10", autocomplete: "username"});
    const pass = el("input", {id: "login-password", type: "password", placeholder: "password", size: "10", autocomplete: "current-password"});
    const form = el("form", {id: "login", class: "inline"}, user, " ", pass, " ", el("button", {type: "submit"}, "log in"));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        await api("/api/login", {}, {user: user.value, password: pass.value});
        location.reload();
      } catch (e) { say("message", `login failed: ${e.message}`); }
    });
    box.append(form);
    if (!s.console_user) {
      needLogin = true;
      say("message", "auth is on: log in as a metaledger user to see this cluster", "warn");
    }
  }

  function bytes(n) {
    if (n === undefined || n === null) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${i ? n.toFixed(1) : n} ${units[i]}`;
  }

  return {api, el, say, init, bytes, get allowWrites() { return allowWrites; }, get cluster() { return cluster; }};
})();
