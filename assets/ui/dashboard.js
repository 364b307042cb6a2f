// delayq dashboard: confirmation of the forms that ask for it, and the
// charts (uPlot): lateness and rates refreshed every few seconds, the
// forecast every minute.
"use strict";

document.addEventListener("submit", function (e) {
  var question = e.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    e.preventDefault();
  }
});

(function () {
  var charts = [];

  function series(kind) {
    if (kind === "forecast") {
      return {
        title: "Falling due per 15 minutes",
        keys: ["count", "low", "high"],
        series: [
          { label: "due", stroke: "#2f6fdf", fill: "rgba(47,111,223,0.25)", width: 1.5,
            paths: uPlot.paths.bars({ size: [0.8, 40], align: 1 }) },
          { label: "95% low", stroke: "rgba(47,111,223,0.45)", width: 1, dash: [4, 4], points: { show: false } },
          { label: "95% high", stroke: "rgba(47,111,223,0.45)", width: 1, dash: [4, 4], points: { show: false } }
        ],
        every: 60000
      };
    }
    if (kind === "lateness") {
      return {
        title: "Lateness of first deliveries (ms)",
        keys: ["latenessMaxMs", "latenessMeanMs"],
        series: [
          { label: "max", stroke: "#c53030", width: 1.5 },
          { label: "mean", stroke: "#2f6fdf", width: 1.5 }
        ]
      };
    }
    return {
      title: "Messages per second",
      keys: ["pushedPerS", "deliveredPerS"],
      series: [
        { label: "pushed", stroke: "#2f6fdf", width: 1.5 },
        { label: "delivered", stroke: "#1f8a4c", width: 1.5 }
      ]
    };
  }

  function columns(data, keys) {
    return [data.time].concat(keys.map(function (k) { return data[k]; }));
  }

  function draw(el, data) {
    var spec = series(el.getAttribute("data-kind"));
    var width = Math.max(300, el.clientWidth - 16);
    var opts = {
      title: spec.title,
      width: width,
      height: 220,
      series: [{}].concat(spec.series),
      axes: [{}, { size: 56 }],
      scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } }
    };
    el.textContent = "";
    var plot = new uPlot(opts, columns(data, spec.keys), el);
    charts.push({ el: el, plot: plot, keys: spec.keys });
  }

  // The charts by the source they read: each source once per refresh; a
  // chart whose first reading failed is drawn at the next one.
  function load(group) {
    fetch(group.src, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        if (!data.time) {
          return;
        }
        if (!group.drawn) {
          group.els.forEach(function (el) { draw(el, data); });
          group.drawn = true;
        } else {
          charts.forEach(function (c) {
            if (group.els.indexOf(c.el) >= 0) {
              c.plot.setData(columns(data, c.keys));
            }
          });
        }
        group.els.forEach(function (el) {
          var title = el.querySelector(".u-title");
          if (title) {
            title.textContent = series(el.getAttribute("data-kind")).title +
              (data.note ? " (" + data.note + ")" : "");
          }
        });
      })
      .catch(function () {});
  }

  function start() {
    if (typeof uPlot === "undefined") {
      return;
    }
    var groups = {};
    document.querySelectorAll(".chart[data-src]").forEach(function (el) {
      var src = el.getAttribute("data-src");
      groups[src] = groups[src] || { src: src, els: [], drawn: false };
      groups[src].els.push(el);
    });
    Object.keys(groups).forEach(function (src) {
      var group = groups[src];
      var every = series(group.els[0].getAttribute("data-kind")).every || 5000;
      load(group);
      setInterval(function () { load(group); }, every);
    });
  }

  document.addEventListener("DOMContentLoaded", start);
})();
