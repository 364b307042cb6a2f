// delayq dashboard: confirmation of the forms that ask for it, and the
// overview's charts (uPlot), refreshed every few seconds.
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

  function load(first) {
    var els = document.querySelectorAll(".chart[data-src]");
    if (!els.length || typeof uPlot === "undefined") {
      return;
    }
    fetch(els[0].getAttribute("data-src"), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        if (first) {
          els.forEach(function (el) { draw(el, data); });
        } else {
          charts.forEach(function (c) { c.plot.setData(columns(data, c.keys)); });
        }
      })
      .catch(function () {});
  }

  document.addEventListener("DOMContentLoaded", function () {
    load(true);
    if (document.querySelector(".chart[data-src]")) {
      setInterval(function () { load(false); }, 5000);
    }
  });
})();
