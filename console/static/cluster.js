// The Cluster page: /api/cluster every second, the chart from /api/cluster/samples.
"use strict";
(() => {
  const {api, el, say, bytes} = ML;
  let plot = null;

  function cell(v, cls = "num") { return el("td", {class: cls}, v === undefined ? "-" : v); }

  function render(st) {
    const facts = document.getElementById("facts");
    facts.replaceChildren();
    if (!st.reachable) {
      say("message", `Cluster ${st.cluster} is unreachable at ${st.endpoints.join(",")}: ${st.error}`);
      document.querySelector("#members tbody").replaceChildren();
      return;
    }
    say("message", st.warning ? `Partial answer: ${st.warning}` : "", "warn");
    const pct = Math.min(100, 100 * st.db_size_bytes / st.quota_bytes);
    facts.append(
      el("span", {}, "leader: ", el("b", {id: "leader"}, st.leader || "(none)")),
      el("span", {}, "term: ", el("b", {id: "term"}, st.term)),
      el("span", {}, "members: ", el("b", {}, st.members.length)),
      el("span", {}, "db size: ", el("b", {id: "dbsize"}, bytes(st.db_size_bytes)), " of ",
         bytes(st.quota_bytes), " quota ", el("span", {class: "bar"}, el("div", {style: `width:${pct}%`}))),
    );
    const body = document.querySelector("#members tbody");
    body.replaceChildren(...st.members.map(m => {
      const tr = el("tr", {"data-name": m.name, class: m.up ? (m.role === "leader" ? "leader" : "") : "down"});
      tr.append(cell(m.name, ""), cell(m.member_id, ""), cell(m.endpoint, ""));
      if (!m.up) {
        tr.append(el("td", {colspan: 7}, `down: ${m.error}`));
        return tr;
      }
      tr.append(cell(m.role, "role"), cell(m.term), cell(m.end_offset), cell(m.commit_offset),
                cell(m.apply_offset), cell(m.lag), cell(bytes(m.db_size_bytes)));
      return tr;
    }));
    const alarms = document.getElementById("alarms");
    alarms.replaceChildren(...(st.alarms.length
      ? st.alarms.map(a => el("div", {class: "banner error"}, `${a.alarm} on ${a.member}`))
      : [document.createTextNode("none")]));
  }

  async function chart() {
    const s = await api("/api/cluster/samples", {seconds: document.getElementById("range").value});
    const data = [s.t, s.commits_per_s, s.apply_lag];
    if (!plot) {
      plot = new uPlot({
        width: Math.min(900, document.body.clientWidth - 40), height: 240,
        series: [{}, {label: "commits/s", stroke: "#2680c2"}, {label: "apply lag", stroke: "#d64545", scale: "lag"}],
        axes: [{}, {}, {side: 1, scale: "lag", grid: {show: false}}],
      }, data, document.getElementById("chart"));
    } else {
      plot.setData(data);
    }
  }

  async function tick() {
    try {
      render(await api("/api/cluster"));
      await chart();
    } catch (e) {
      say("message", `The console could not answer: ${e.message}`);
    }
    document.body.dataset.refreshed = String(Date.now());
  }

  // the next refresh is asked a second after the last one answered: a slow cluster never
  // piles requests up
  async function loop() { await tick(); setTimeout(loop, 1000); }
  ML.init("/").then(loop)
    .catch(e => say("message", `The console could not start: ${e.message}`));
})();
