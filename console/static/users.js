// The Users and roles page: auth on or off, users with their roles, roles with their
// permissions; with --allow-writes, changes confirmed by naming the user or role.
"use strict";
(() => {
  const {api, el, say} = ML;
  const ACTIONS = {
    user_add: "add the user", user_delete: "delete the user",
    user_grant_role: "grant a role to the user", user_revoke_role: "revoke a role from the user",
    role_add: "add the role", role_delete: "delete the role",
    role_grant_permission: "grant a permission to the role",
    role_revoke_permission: "revoke a permission from the role",
  };

  async function load() {
    try {
      const r = await api("/api/users");
      document.getElementById("authstate").textContent = r.auth_enabled ? "enabled" : "disabled";
      document.querySelector("#users tbody").replaceChildren(...r.users.map((u) =>
        el("tr", {"data-user": u.name}, el("td", {}, u.name), el("td", {}, u.roles.join(", ") || "-"))));
      const rows = [];
      for (const role of r.roles) {
        const perms = role.permissions.length ? role.permissions : [null];
        perms.forEach((p, i) => rows.push(el("tr", {"data-role": role.name},
          el("td", {}, i ? "" : role.name),
          el("td", {}, p ? p.type : "-"),
          el("td", {}, p ? `${p.kind === "key" ? "" : p.kind + " "}${p.key}` : ""),
          el("td", {}, p ? p.range_end : ""))));
      }
      document.querySelector("#roles tbody").replaceChildren(...rows);
      if (r.more_users || r.more_roles) say("message", `${r.more_users} more users and ${r.more_roles} more roles not shown`, "warn");
    } catch (e) { say("message", e.message); }
  }

  async function apply(ev) {
    ev.preventDefault();
    const v = (id) => document.getElementById(id).value;
    const action = v("action");
    const body = {action, name: v("cname"), role: v("crole"), password: v("cpassword"),
                  type: v("ctype"), key: v("ckey"), kind: v("ckind"), range_end: v("cend")};
    let what = `${ACTIONS[action]} ${body.name}`;
    if (action.endsWith("_role") && action.startsWith("user")) what += ` (role ${body.role})`;
    if (action.endsWith("_permission")) what += ` (${body.type} ${body.kind} ${body.key}${body.range_end ? " .. " + body.range_end : ""})`;
    if (!confirm(`On cluster ${ML.cluster}: ${what}?`)) return;
    try {
      const r = await api("/api/users/change", {}, {...body, confirm: body.name});
      say("message", `done: ${what} (revision ${r.revision})`, "ok");
      load();
    } catch (e) { say("message", e.message); }
  }

  ML.init("/users").then(() => {
    if (ML.allowWrites) {
      const sel = document.getElementById("action");
      for (const [k, text] of Object.entries(ACTIONS)) sel.append(el("option", {value: k}, text));
      const form = document.getElementById("changer");
      form.hidden = false;
      form.addEventListener("submit", apply);
    }
    load();
  }).catch((e) => say("message", e.message));
})();
