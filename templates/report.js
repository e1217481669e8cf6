/* bwdiag report: roofline chart, kernel table and small interactions.
 * Inlined into report.html. Data comes only from the JSON block #data; every string from it is
 * put into the page with textContent or setAttribute, never parsed as HTML. Number formatting
 * follows bwdiag/units.py. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var KCOLS = D.kernels.columns;  /* columnar in the page, one object per group here */
  D.kernels = D.kernels.rows.map(function (row) {
    var o = {};
    for (var i = 0; i < KCOLS.length; i++) o[KCOLS[i]] = row[i];
    return o;
  });
  var SVG = "http://www.w3.org/2000/svg";
  var BOUNDS = ["compute", "memory", "latency", "communication", "unknown"];

  /* ---------------------------------------------------------------- formatting */
  function finite(x) { return typeof x === "number" && isFinite(x); }
  function sig(x, digits) {
    if (x === 0) return "0";
    digits = digits || 3;
    var mag = Math.floor(Math.log10(Math.abs(x)));
    var dec = Math.max(0, digits - 1 - mag);
    var s = x.toFixed(dec);
    if (s.indexOf(".") >= 0) s = s.replace(/0+$/, "").replace(/\.$/, "");
    return s;
  }
  function fmtTime(us) {
    if (!finite(us)) return "—";
    var a = Math.abs(us);
    if (a >= 1e6) return sig(us / 1e6) + " s";
    if (a >= 1e3) return sig(us / 1e3) + " ms";
    return sig(us) + " µs";
  }
  var SI = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  function fmtSI(x, unit) {
    if (!finite(x)) return "—";
    for (var i = 0; i < SI.length; i++) {
      if (Math.abs(x) >= SI[i][0]) return sig(x / SI[i][0]) + " " + SI[i][1] + unit;
    }
    return sig(x) + " " + unit;
  }
  function fmtPct(p) {
    if (!finite(p)) return "—";
    if (p > 0 && p < 0.1) return "<0.1%";
    if (Math.abs(p) >= 1000) return Math.round(p).toLocaleString("en-US") + "%";
    return p.toFixed(1) + "%";
  }
  /* A rate in a column whose header names the unit: "617 T" under FLOP/s. */
  function fmtShort(x) { return finite(x) ? fmtSI(x, "").trim() : "—"; }
  function fmtCount(n) { return finite(n) ? Math.round(n).toLocaleString("en-US") : "—"; }
  function fmtAxis(x) {
    if (x >= 1 && x < 1000) return String(x);
    if (x < 1) return String(Number(x.toPrecision(1)));
    return fmtSI(x, "").trim();
  }

  /* ---------------------------------------------------------------- DOM helpers */
  function el(tag, attrs, text) {
    var n = document.createElement(tag);
    if (attrs) for (var k in attrs) if (attrs[k] !== null && attrs[k] !== undefined) n.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function svg(tag, attrs, text) {
    var n = document.createElementNS(SVG, tag);
    if (attrs) for (var k in attrs) n.setAttribute(k, attrs[k]);
    if (text !== undefined) n.textContent = String(text);
    return n;
  }

  /* ---------------------------------------------------------------- tooltip */
  var tip = document.getElementById("tooltip");
  function showTip(evt, k) {
    var r = D.kernels[k];
    tip.textContent = "";
    tip.appendChild(el("div", { "class": "t-name" }, r.name));
    var t = el("table");
    function row(label, value) {
      if (value === null || value === undefined || value === "" || value === "—") return;
      var tr = el("tr");
      tr.appendChild(el("th", null, label));
      tr.appendChild(el("td", null, value));
      t.appendChild(tr);
    }
    if (D.ranks_aggregated) row("ranks", fmtCount(r.ranks) + " · per rank " + fmtTime(r.rank_min_us) + " – " + fmtTime(r.rank_max_us) + " (most on rank " + r.rank + ")");
    else if (D.multi_rank) row("rank", r.rank);
    row("op", r.op);
    row("module", r.module);
    row("shapes", r.shapes);
    row("time", fmtTime(r.total_us) + "  (" + fmtCount(r.count) + " × " + fmtTime(r.mean_us) + ", " + fmtPct(r.share_pct) + " of kernel time)");
    row("achieved", fmtSI(r.achieved_flops_per_s, "FLOP/s") + " · " + fmtSI(r.achieved_bytes_per_s, "B/s"));
    row("intensity", finite(r.intensity) ? sig(r.intensity) + " FLOP/B" : null);
    row("bound", r.bound + (r.ceiling ? " (" + r.ceiling + ")" : ""));
    row("of ceiling", fmtPct(r.pct_of_ceiling));
    tip.appendChild(t);
    tip.hidden = false;
    moveTip(evt);
  }
  function moveTip(evt) {
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var x = evt.clientX + 14, y = evt.clientY + 14;
    if (x + w > window.innerWidth - 8) x = evt.clientX - w - 14;
    if (y + h > window.innerHeight - 8) y = evt.clientY - h - 14;
    tip.style.left = Math.max(4, x) + "px";
    tip.style.top = Math.max(4, y) + "px";
  }
  function hideTip() { tip.hidden = true; }

  /* ---------------------------------------------------------------- roofline */
  var pointNodes = {};
  /* Marks on the chart and on the strip share one size scale: the longest group of either. */
  function maxTime() {
    var t = 0;
    D.roofline.points.concat(D.roofline.bandwidth.marks).forEach(function (p) { if (p.t > t) t = p.t; });
    return t || 1;
  }
  function drawRoofline() {
    var R = D.roofline, box = document.getElementById("roof-chart");
    var W = 820, H = 470, ml = 72, mr = 24, mt = 18, mb = 50;
    var pw = W - ml - mr, ph = H - mt - mb;
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "Roofline chart", id: "roof-svg", "class": "roofsvg" });
    box.appendChild(root);
    if (!R.extent) {
      var msg = D.kernels.length ? "No " + (D.item_label === "Kernel" ? "kernel" : D.item_label) + " group has both a FLOP and a byte estimate, so none can be placed on the roofline."
        : "No " + (D.item_label === "Kernel" ? "kernel" : D.item_label) + "s in this trace: nothing to place on a roofline.";
      root.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", "class": "empty" }, msg));
      return;
    }
    var E = R.extent;
    var lx0 = Math.log10(E.xmin), lx1 = Math.log10(E.xmax), ly0 = Math.log10(E.ymin), ly1 = Math.log10(E.ymax);
    function sx(x) { return ml + (Math.log10(x) - lx0) / (lx1 - lx0) * pw; }
    function sy(y) { return mt + ph - (Math.log10(y) - ly0) / (ly1 - ly0) * ph; }
    var defs = svg("defs");
    var clip = svg("clipPath", { id: "plot-clip" });
    clip.appendChild(svg("rect", { x: ml, y: mt, width: pw, height: ph }));
    defs.appendChild(clip);
    root.appendChild(defs);
    var i, d;
    for (d = Math.ceil(lx0); d <= Math.floor(lx1); d++) {
      var X = sx(Math.pow(10, d));
      root.appendChild(svg("line", { x1: X, x2: X, y1: mt, y2: mt + ph, "class": "grid-line" }));
      root.appendChild(svg("text", { x: X, y: mt + ph + 16, "text-anchor": "middle" }, fmtAxis(Math.pow(10, d))));
    }
    for (d = Math.ceil(ly0); d <= Math.floor(ly1); d++) {
      var Y = sy(Math.pow(10, d));
      root.appendChild(svg("line", { x1: ml, x2: ml + pw, y1: Y, y2: Y, "class": "grid-line" }));
      root.appendChild(svg("text", { x: ml - 8, y: Y + 4, "text-anchor": "end" }, fmtAxis(Math.pow(10, d))));
    }
    root.appendChild(svg("rect", { x: ml, y: mt, width: pw, height: ph, "class": "frame" }));
    root.appendChild(svg("text", { x: ml + pw / 2, y: H - 10, "text-anchor": "middle", "class": "axis-title" }, "Arithmetic intensity (FLOP/byte)"));
    root.appendChild(svg("text", { x: 16, y: mt + ph / 2, "text-anchor": "middle", "class": "axis-title", transform: "rotate(-90 16 " + (mt + ph / 2) + ")" }, "Achieved FLOP/s"));

    var g = svg("g", { "clip-path": "url(#plot-clip)" });
    root.appendChild(g);
    var labels = svg("g");
    var bw = R.memory_bandwidth, roofs = R.roofs;
    var top = roofs.length ? roofs[0] : null;
    if (bw) {
      var xEnd = top && top.ridge ? top.ridge : E.xmax;
      g.appendChild(svg("line", { x1: sx(E.xmin), y1: sy(bw * E.xmin), x2: sx(xEnd), y2: sy(bw * xEnd), "class": "mem-roof" }));
      // Label along the slope, where it is inside the plot.
      var lxs = Math.max(E.xmin * 1.6, E.ymin * 3 / bw);
      if (lxs < xEnd / 4) {
        var p0x = sx(lxs), p0y = sy(bw * lxs), p1x = sx(lxs * 10), p1y = sy(bw * lxs * 10);
        var ang = Math.atan2(p1y - p0y, p1x - p0x) * 180 / Math.PI;
        labels.appendChild(svg("text", { x: p0x, y: p0y - 6, "class": "roof-label", transform: "rotate(" + ang + " " + p0x + " " + p0y + ")" },
          "memory " + fmtSI(bw, "B/s")));
      }
    }
    root.appendChild(labels);  /* attached now so label widths can be measured */
    var placed = [], lastRidgeX = -1e9;
    function overlaps(b) {
      for (var j = 0; j < placed.length; j++) {
        var o = placed[j];
        if (b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1) return true;
      }
      return false;
    }
    /* Each roof's label sits on its own line, from its ridge point rightwards (ridges of higher
       roofs lie further right, so labels stagger naturally): above the line if that is free of
       other labels and roof lines, else below it, else a little further right. */
    for (i = 0; i < roofs.length; i++) {
      var ry = sy(roofs[i].flops), rx = roofs[i].ridge ? Math.max(ml, sx(roofs[i].ridge)) : ml;
      placed.push({ x0: rx, x1: ml + pw, y0: ry - 0.5, y1: ry + 0.5 });
    }
    function placeLabel(text, y, xmin) {
      var node = svg("text", { x: 0, y: 0, "class": "roof-label" }, text);
      labels.appendChild(node);
      var w = node.getComputedTextLength(), tries = [y - 4, y + 12], b;
      for (var xs = xmin + 6; xs + w <= ml + pw - 2; xs += 30) {
        for (var t = 0; t < tries.length; t++) {
          b = { x0: xs - 2, x1: xs + w + 2, y0: tries[t] - 10, y1: tries[t] + 2 };
          if (b.y0 < mt || b.y1 > mt + ph || overlaps(b)) continue;
          placed.push(b);
          node.setAttribute("x", xs);
          node.setAttribute("y", tries[t]);
          return;
        }
      }
      node.setAttribute("x", Math.max(ml + 2, Math.min(xmin + 6, ml + pw - w - 2)));  /* crowded: above its line */
      node.setAttribute("y", y - 4);
    }
    for (i = 0; i < roofs.length; i++) {
      var r = roofs[i], y = sy(r.flops), x0 = r.ridge ? sx(r.ridge) : ml;
      g.appendChild(svg("line", { x1: x0, y1: y, x2: ml + pw, y2: y, "class": "roof" + (r.vector ? " vector" : "") }));
      placeLabel(r.label + " " + fmtSI(r.flops, "FLOP/s"), y, Math.max(ml, x0));
      if (r.ridge && r.ridge >= E.xmin && r.ridge <= E.xmax) {
        g.appendChild(svg("line", { x1: x0, x2: x0, y1: y, y2: mt + ph, "class": "ridge-line" }));
        var c = svg("circle", { cx: x0, cy: y, r: 3.5, "class": "ridge" });
        c.appendChild(svg("title", {}, "ridge point of " + r.label + ": " + sig(r.ridge) + " FLOP/B"));
        labels.appendChild(c);
        if (Math.abs(x0 - lastRidgeX) > 30) {
          labels.appendChild(svg("text", { x: x0 + 3, y: mt + ph - 5, "class": "ridge-label" }, sig(r.ridge)));
          lastRidgeX = x0;
        }
      }
    }
    var pts = R.points.slice().sort(function (a, b) { return b.t - a.t; });
    var tmax = maxTime();
    var pg = svg("g", { id: "roof-points" });
    for (i = 0; i < pts.length; i++) {
      var p = pts[i];
      var rad = 3 + 15 * Math.sqrt(Math.max(p.t, 0) / (tmax || 1));
      var node = svg("circle", { cx: sx(p.x), cy: sy(p.y), r: rad.toFixed(2), "class": "pt b-" + p.b, "data-k": p.k });
      pointNodes[p.k] = node;
      pg.appendChild(node);
    }
    root.insertBefore(pg, labels);
    hookPoints(pg);

    drawLegend(root);
  }

  /* The legend lists what the chart and the strip drew, read back from the SVG itself: one
     entry per bound with points (its marker, its count), and one per kind of line drawn. */
  function legendMarker(kind, cls) {
    var m = svg("svg", { width: kind === "pt" ? 12 : 26, height: 12, "class": "roofsvg marker", "aria-hidden": "true" });
    if (kind === "pt") m.appendChild(svg("circle", { cx: 6, cy: 6, r: 5, "class": cls }));
    else if (kind === "ridge") { m.setAttribute("width", 12); m.appendChild(svg("circle", { cx: 6, cy: 6, r: 3.5, "class": "ridge" })); }
    else m.appendChild(svg("line", { x1: 1, y1: 6, x2: 25, y2: 6, "class": cls }));
    return m;
  }
  function legendEntry(list, series, marker, text) {
    var li = el("li", { "data-series": series });
    li.appendChild(marker);
    li.appendChild(document.createTextNode(text));
    list.appendChild(li);
  }
  function drawLegend(root) {
    var legend = document.getElementById("roof-legend");
    legend.textContent = "";
    BOUNDS.forEach(function (b) {
      var n = root.querySelectorAll("#roof-points circle.pt.b-" + b).length;
      if (n) legendEntry(legend, "point:" + b, legendMarker("pt", "pt b-" + b), b + " " + n);
    });
    if (root.querySelector("line.roof:not(.vector)")) legendEntry(legend, "roof", legendMarker("line", "roof"), "peak FLOP/s per dtype");
    if (root.querySelector("line.roof.vector")) legendEntry(legend, "roof-vector", legendMarker("line", "roof vector"), "vector units (no tensor cores)");
    if (root.querySelector("line.mem-roof")) legendEntry(legend, "mem-roof", legendMarker("line", "mem-roof"), "memory bandwidth");
    if (root.querySelector("circle.ridge")) legendEntry(legend, "ridge", legendMarker("ridge"), "ridge point (FLOP/B)");
    if (root.querySelector("#roof-points circle.pt")) legend.appendChild(el("li", { "class": "muted" }, "size ∝ time"));
  }

  /* ---------------------------------------------------------------- bandwidth strip */
  /* Groups that move bytes without FLOPs (copies, casts, fills): one mark each at its achieved
     B/s, against the memory roof; same colours and sizes as the chart's points. */
  function drawStrip(tmax) {
    var S = D.roofline.bandwidth, box = document.getElementById("bw-strip");
    if (!box || !S.marks.length || !S.extent) return;  /* the template leaves the strip out without marks */
    var W = 820, ml = 72, mr = 24, mt = 20, lane = 8, lanes = 9;
    var ph = lane * (lanes - 1) + 36, H = mt + ph + 40, pw = W - ml - mr;
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "Bandwidth strip", id: "bw-svg", "class": "roofsvg" });
    box.appendChild(root);
    var lx0 = Math.log10(S.extent.xmin), lx1 = Math.log10(S.extent.xmax);
    function sx(x) { return ml + (Math.log10(x) - lx0) / (lx1 - lx0) * pw; }
    var d;
    for (d = Math.ceil(lx0); d <= Math.floor(lx1); d++) {
      var X = sx(Math.pow(10, d));
      root.appendChild(svg("line", { x1: X, x2: X, y1: mt, y2: mt + ph, "class": "grid-line" }));
      root.appendChild(svg("text", { x: X, y: mt + ph + 16, "text-anchor": "middle" }, fmtSI(Math.pow(10, d), "B/s")));
    }
    root.appendChild(svg("rect", { x: ml, y: mt, width: pw, height: ph, "class": "frame" }));
    root.appendChild(svg("text", { x: ml + pw / 2, y: H - 8, "text-anchor": "middle", "class": "axis-title" }, "Achieved bandwidth (B/s) of groups without FLOPs"));
    if (S.memory_bandwidth) {
      var mx = sx(S.memory_bandwidth);
      root.appendChild(svg("line", { x1: mx, x2: mx, y1: mt, y2: mt + ph, "class": "mem-roof" }));
      root.appendChild(svg("text", { x: Math.min(mx, ml + pw - 4), y: mt - 6, "text-anchor": mx > ml + pw - 60 ? "end" : "middle", "class": "roof-label" }, "memory roof " + fmtSI(S.memory_bandwidth, "B/s")));
    }
    var cy = mt + ph / 2, placed = [];
    var marks = S.marks.slice().sort(function (a, b) { return b.t - a.t; });
    var g = svg("g", { id: "bw-marks" });
    marks.forEach(function (m) {
      var rad = 3 + 15 * Math.sqrt(Math.max(m.t, 0) / (tmax || 1));
      rad = Math.min(rad, ph / 2 - 2);
      var x = sx(m.x), y = cy, found = false;
      /* A simple beeswarm: the first lane, outwards from the middle, where it stays inside the
         frame and overlaps nothing; crowded: the middle lane. */
      for (var i = 0; i < 2 * lanes && !found; i++) {
        var yy = cy + (i % 2 ? -1 : 1) * Math.ceil(i / 2) * lane;
        if (yy - rad < mt + 1 || yy + rad > mt + ph - 1) continue;
        found = true;
        for (var j = 0; j < placed.length; j++) {
          var o = placed[j], dx = o.x - x, dy = o.y - yy;
          if (dx * dx + dy * dy < (o.r + rad) * (o.r + rad) * 0.8) { found = false; break; }
        }
        if (found) y = yy;
      }
      placed.push({ x: x, y: y, r: rad });
      var node = svg("circle", { cx: x.toFixed(2), cy: y.toFixed(2), r: rad.toFixed(2), "class": "pt b-" + m.b, "data-k": m.k });
      pointNodes[m.k] = node;
      g.appendChild(node);
    });
    root.appendChild(g);
    hookPoints(g);
    var legend = document.getElementById("bw-legend");
    BOUNDS.forEach(function (b) {
      var n = g.querySelectorAll("circle.pt.b-" + b).length;
      if (n) legendEntry(legend, "mark:" + b, legendMarker("pt", "pt b-" + b), b + " " + n);
    });
    if (root.querySelector("line.mem-roof")) legendEntry(legend, "mem-roof", legendMarker("line", "mem-roof"), "memory bandwidth");
  }
  function hookPoints(g) {
    g.addEventListener("mouseover", function (e) { var k = e.target.getAttribute("data-k"); if (k !== null) showTip(e, +k); });
    g.addEventListener("mousemove", function (e) { if (!tip.hidden) moveTip(e); });
    g.addEventListener("mouseout", hideTip);
    g.addEventListener("click", function (e) { var k = e.target.getAttribute("data-k"); if (k !== null) { hideTip(); selectPoint(+k); table.reveal(+k); } });
  }
  function selectPoint(k) {
    var prev = document.querySelector("circle.pt.sel");
    if (prev) prev.classList.remove("sel");
    if (pointNodes[k]) {
      pointNodes[k].classList.add("sel");
      pointNodes[k].parentNode.appendChild(pointNodes[k]);
    }
  }

  function drawUnplotted() {
    var R = D.roofline, list = document.getElementById("unplotted-list");
    document.getElementById("unplotted-title").textContent =
      "Not on the chart: " + R.unplotted.length + " of " + D.kernels.length + " groups";
    document.getElementById("unplotted-note").textContent = R.unplotted.length
      ? fmtTime(R.unplotted_us) + " of " + (D.item_label === "Kernel" ? "kernel" : "op") + " time that neither the chart nor the bandwidth strip can place. Click one to find it in the table."
      : "Every group is on the chart or the bandwidth strip.";
    var frag = document.createDocumentFragment();
    R.unplotted.forEach(function (u) {
      var r = D.kernels[u.k];
      var li = el("li", { "data-k": u.k, title: r.name });
      li.appendChild(el("span", { "class": "u-name" }, r.name));
      li.appendChild(el("span", { "class": "u-meta" }, fmtTime(r.total_us) + " · " + u.reason));
      frag.appendChild(li);
    });
    list.appendChild(frag);
    list.addEventListener("click", function (e) {
      var li = e.target.closest("li[data-k]");
      if (li) table.reveal(+li.getAttribute("data-k"));
    });
  }

  /* ---------------------------------------------------------------- kernel table */
  var table = (function () {
    var PAGE = 50;
    /* Widths (px) of a fixed-layout table: at 1280 px the whole row fits, name first; long
       text is cut with an ellipsis, shown whole on hover (title) or by clicking its cell. */
    var cols = [];
    if (D.ranks_aggregated) cols.push({ key: "ranks", label: "Ranks", num: true, fmt: fmtCount, w: 58 });
    else if (D.multi_rank) cols.push({ key: "rank", label: "Rank", num: true, fmt: String, w: 52 });
    cols.push({ key: "name", label: D.item_label, cls: "name", cut: true });
    cols.push({ key: "category", label: "Category", cls: "cut small-text", cut: true, w: 92 });
    if (D.show_op_column) cols.push({ key: "op", label: "Op", cls: "mono", cut: true, w: 86 });
    cols.push(
      { key: "module", label: "Module", cls: "mono", cut: true, w: 92 },
      { key: "shapes", label: "Shapes", cls: "mono", cut: true, w: 96 },
      { key: "count", label: "Count", num: true, fmt: fmtCount, w: 58 },
      { key: "total_us", label: "Time", num: true, fmt: fmtTime, w: 64 },
      { key: "share_pct", label: "% time", num: true, fmt: fmtPct, w: 62 },
      { key: "mean_us", label: "Mean", num: true, fmt: fmtTime, w: 62 },
      { key: "achieved_flops_per_s", label: "FLOP/s", num: true, fmt: fmtShort, w: 66 },
      { key: "achieved_bytes_per_s", label: "B/s", num: true, fmt: fmtShort, w: 62 },
      { key: "bound", label: "Bound", chip: true, w: 98 },
      { key: "pct_of_ceiling", label: "% of ceiling", num: true, bar: true, w: 96 }
    );
    var tbl = document.getElementById("k-table"), tbody = tbl.tBodies[0];
    var state = { sort: "total_us", dir: -1, page: 0, text: "", bound: "", category: "", plotted: "", hl: null, open: null };
    var view = [];
    var ths = [];

    var colgroup = el("colgroup");
    cols.forEach(function (c) { colgroup.appendChild(el("col", { "data-key": c.key, style: c.w ? "width: " + c.w + "px" : null })); });
    tbl.insertBefore(colgroup, tbl.tHead);
    var tr = el("tr");
    cols.forEach(function (c) {
      var th = el("th", { "class": c.num ? "num" : null, "data-key": c.key, tabindex: "0", "aria-sort": "none", title: "Sort by " + c.label.toLowerCase() }, c.label);
      ths.push(th);
      tr.appendChild(th);
    });
    tbl.tHead.appendChild(tr);
    function sortBy(e) {
      var th = e.target.closest("th[data-key]");
      if (!th) return;
      if (e.type === "keydown") {
        if (e.key !== "Enter" && e.key !== " ") return;
        e.preventDefault();
      }
      var key = th.getAttribute("data-key");
      if (state.sort === key) state.dir = -state.dir;
      else { state.sort = key; state.dir = (cols.filter(function (c) { return c.key === key; })[0].num) ? -1 : 1; }
      state.page = 0;
      update();
    }
    tbl.tHead.addEventListener("click", sortBy);
    tbl.tHead.addEventListener("keydown", sortBy);

    function haystack(r) {
      return [r.name, r.op, r.module, r.shapes, r.category, r.dtype].join("\u0001").toLowerCase();
    }
    var hay = D.kernels.map(haystack);

    function compute() {
      var text = state.text.toLowerCase();
      view = [];
      for (var i = 0; i < D.kernels.length; i++) {
        var r = D.kernels[i];
        if (text && hay[i].indexOf(text) < 0) continue;
        if (state.bound && r.bound !== state.bound) continue;
        if (state.category && r.category !== state.category) continue;
        if (state.plotted === "yes" && !r.plotted) continue;
        if (state.plotted === "no" && r.plotted) continue;
        view.push(i);
      }
      var key = state.sort, dir = state.dir;
      view.sort(function (a, b) {
        var x = D.kernels[a][key], y = D.kernels[b][key];
        var xn = x === null || x === undefined, yn = y === null || y === undefined;
        if (xn || yn) return xn === yn ? a - b : (xn ? 1 : -1);  // unknowns last, either way
        if (x < y) return -dir;
        if (x > y) return dir;
        return a - b;
      });
    }

    function cell(c, r) {
      var v = r[c.key];
      var td = el("td", { "class": (c.num ? "num " : "") + (c.cls || "") });
      if (c.chip) {
        /* "communication" does not fit the column: the chip says "comm.", its title the rest. */
        td.appendChild(el("span", { "class": "bound-chip b-" + v, title: v + (r.ceiling ? " (" + r.ceiling + ")" : "") },
          v === "communication" ? "comm." : v));
      } else if (c.bar) {
        if (finite(v)) {
          var bar = el("span", { "class": "pctbar" });
          bar.appendChild(el("span", { style: "width: " + Math.max(0, Math.min(100, v)).toFixed(1) + "%" }));
          td.appendChild(bar);
        }
        td.appendChild(document.createTextNode(fmtPct(v)));
        if (r.ceiling) td.setAttribute("title", "of " + r.ceiling);
      } else {
        var text = c.fmt ? c.fmt(v) : (v === null || v === undefined || v === "" ? "—" : String(v));
        td.textContent = text;
        if (c.cut && v) td.setAttribute("title", String(v) + "  (click to show it whole)");
      }
      return td;
    }

    function render() {
      var pages = Math.max(1, Math.ceil(view.length / PAGE));
      state.page = Math.min(state.page, pages - 1);
      var start = state.page * PAGE, end = Math.min(view.length, start + PAGE);
      var frag = document.createDocumentFragment();
      for (var i = start; i < end; i++) {
        var k = view[i], r = D.kernels[k];
        var row = el("tr", { "data-k": k, "class": ((state.hl === k ? "hl " : "") + (state.open === k ? "open" : "")).trim() || null });
        for (var j = 0; j < cols.length; j++) row.appendChild(cell(cols[j], r));
        frag.appendChild(row);
      }
      tbody.textContent = "";
      tbody.appendChild(frag);
      if (!view.length) {
        var empty = el("tr");
        empty.appendChild(el("td", { colspan: cols.length, "class": "muted" }, D.kernels.length ? "No kernel group matches the filter." : "No kernels in this trace."));
        tbody.appendChild(empty);
      }
      document.getElementById("k-range").textContent = view.length
        ? (start + 1) + "–" + end + " of " + fmtCount(view.length) : "0 of 0";
      document.getElementById("k-prev").disabled = state.page === 0;
      document.getElementById("k-next").disabled = state.page >= pages - 1;
      ths.forEach(function (th) {
        th.classList.remove("sorted-asc", "sorted-desc");
        th.setAttribute("aria-sort", "none");
        if (th.getAttribute("data-key") === state.sort) {
          th.classList.add(state.dir > 0 ? "sorted-asc" : "sorted-desc");
          th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
        }
      });
    }
    function update() { compute(); render(); }

    var input = document.getElementById("k-filter"), timer = null;
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { state.text = input.value; state.page = 0; update(); }, 120);
    });
    [["k-bound", "bound"], ["k-category", "category"], ["k-plotted", "plotted"]].forEach(function (pair) {
      var s = document.getElementById(pair[0]);
      s.addEventListener("change", function () { state[pair[1]] = s.value; state.page = 0; update(); });
    });
    document.getElementById("k-prev").addEventListener("click", function () { state.page--; render(); });
    document.getElementById("k-next").addEventListener("click", function () { state.page++; render(); });
    tbody.addEventListener("click", function (e) {
      var row = e.target.closest("tr[data-k]");
      if (!row) return;
      var k = +row.getAttribute("data-k");
      state.hl = k;
      /* A click on a cut cell (name, op, module, shapes) shows the row's texts whole; again: cut. */
      if (e.target.closest("td.name, td.mono, td.cut")) state.open = state.open === k ? null : k;
      render();
      selectPoint(k);
    });

    function clearFilters() {
      state.text = state.bound = state.category = state.plotted = "";
      input.value = "";
      ["k-bound", "k-category", "k-plotted"].forEach(function (id) { document.getElementById(id).value = ""; });
    }
    return {
      update: update,
      /* Show kernel group k: clear the filters, go to its page, highlight and scroll to it. */
      reveal: function (k) {
        clearFilters();
        state.hl = k;
        compute();
        var pos = view.indexOf(k);
        state.page = Math.floor(Math.max(0, pos) / PAGE);
        render();
        var row = tbody.querySelector('tr[data-k="' + k + '"]');
        if (row) row.scrollIntoView({ block: "center" });
        return row;
      },
      filter: function (text) {
        clearFilters();
        state.text = text; input.value = text; state.page = 0; update();
        document.getElementById("kernels").scrollIntoView();
      },
      view: function () { return view.slice(); }
    };
  })();


  /* ---------------------------------------------------------------- rank × step heat strip */
  /* One column per rank, one row per step, coloured by duration ÷ median: white at or under the
     median, through salmon (1.25×) to dark red at 1.5× or more; grey where a rank has no such step. */
  function heatColour(ratio) {
    if (!finite(ratio)) return [204, 204, 204];
    var t = Math.max(0, Math.min(1, (ratio - 1) / 0.5));
    var stops = [[255, 255, 255], [244, 165, 130], [178, 24, 43]];
    var i = t < 0.5 ? 0 : 1, u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
    return [0, 1, 2].map(function (c) { return Math.round(stops[i][c] + (stops[i + 1][c] - stops[i][c]) * u); });
  }
  function drawHeat() {
    var H = D.heat_strip, cv = document.getElementById("heat-strip");
    if (!H || !cv) return;
    var nr = H.ranks.length, ns = H.steps.length;
    var cw = Math.max(1, Math.min(24, Math.floor(1100 / nr))), ch = Math.max(6, Math.min(18, Math.floor(240 / ns)));
    cv.width = nr * cw; cv.height = ns * ch;
    cv.style.width = cv.width + "px"; cv.style.height = cv.height + "px";
    var g = cv.getContext("2d"), img = g.createImageData(cv.width, cv.height), px = img.data;
    for (var i = 0; i < nr; i++) {
      for (var j = 0; j < ns; j++) {
        var v = H.values[i][j], rgb = heatColour(v === null ? NaN : v / H.median_us);
        for (var y = j * ch; y < (j + 1) * ch; y++) {
          for (var x = i * cw; x < (i + 1) * cw; x++) {
            var o = (y * cv.width + x) * 4;
            px[o] = rgb[0]; px[o + 1] = rgb[1]; px[o + 2] = rgb[2]; px[o + 3] = 255;
          }
        }
      }
    }
    g.putImageData(img, 0, 0);
    cv.addEventListener("mousemove", function (e) {
      var b = cv.getBoundingClientRect();
      var i = Math.floor((e.clientX - b.left) / cw), j = Math.floor((e.clientY - b.top) / ch);
      if (i < 0 || i >= nr || j < 0 || j >= ns) { hideTip(); return; }
      var v = H.values[i][j];
      tip.textContent = "rank " + H.ranks[i] + " · step " + H.steps[j] + ": " +
        (v === null ? "not completed" : fmtTime(v) + " (" + sig(v / H.median_us) + "× the median)");
      tip.hidden = false;
      moveTip(e);
    });
    cv.addEventListener("mouseleave", hideTip);
  }

  /* ---------------------------------------------------------------- findings */
  document.addEventListener("click", function (e) {
    var find = e.target.closest("button.find");
    if (find) { table.filter(find.getAttribute("data-find")); return; }
    var copy = e.target.closest("button.copy");
    if (copy) {
      var text = document.getElementById(copy.getAttribute("data-copy")).textContent;
      var done = function () { copy.textContent = "Copied"; copy.classList.add("done"); setTimeout(function () { copy.textContent = "Copy"; copy.classList.remove("done"); }, 1500); };
      var selectIt = function () {  /* last resort: select the fix so Ctrl+C copies it */
        var range = document.createRange();
        range.selectNodeContents(document.getElementById(copy.getAttribute("data-copy")));
        var sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        copy.textContent = "Selected: press Ctrl+C";
      };
      var fallback = function () {
        var ta = el("textarea");
        ta.value = text;
        ta.setAttribute("readonly", "");
        ta.style.position = "fixed"; ta.style.opacity = "0";
        document.body.appendChild(ta);
        ta.select();
        var ok = false;
        try { ok = document.execCommand("copy"); } finally { document.body.removeChild(ta); }
        if (ok) done(); else selectIt();
      };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, fallback);
      else fallback();
    }
  });

  table.update();
  drawRoofline();
  drawStrip(maxTime());
  drawUnplotted();
  drawHeat();
  window.bwdiagReport = { data: D, table: table, selectPoint: selectPoint };
  document.documentElement.setAttribute("data-rendered", "1");
})();
