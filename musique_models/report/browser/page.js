(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("browse-data").textContent);
  var T = DATA.texts, ROWS = DATA.rows, GROUPS = DATA.groups;
  var $ = function (id) { return document.getElementById(id); };
  var hopValues = Array.from(new Set(ROWS.map(function (r) { return r.num_hops; }))).sort(function (a, b) { return a - b; });
  var hasUnanswerable = ROWS.some(function (r) { return !r.answerable; });
  var state = { page: 0, size: 10 };
  var matched = [];

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function num(x, digits) { return x === null || x === undefined ? "\u2013" : Number(x).toFixed(digits === undefined ? 2 : digits); }
  function correctness(f1) { return f1 >= 1 ? "correct" : f1 <= 0 ? "wrong" : "partial"; }
  function scoreClass(f1) { return f1 >= 1 ? "ok" : f1 <= 0 ? "wrong" : "partial"; }
  function badge(text, cls) { return el("span", "badge" + (cls ? " " + cls : ""), text); }

  // ---- filters -------------------------------------------------------------------------------------------
  function readFilters() {
    var hops = new Set();
    document.querySelectorAll("#hops input").forEach(function (box) { if (box.checked) hops.add(Number(box.value)); });
    return {
      hops: hops,
      correctness: $("correctness").value,
      sfMin: $("sf-min").value === "" ? 0 : Number($("sf-min").value),
      sfMax: $("sf-max").value === "" ? 1 : Number($("sf-max").value),
      answerability: $("answerability").value,
      search: $("search").value.trim().toLowerCase()
    };
  }
  function rowMatches(r, f) {
    if (!f.hops.has(r.num_hops)) return false;
    if (f.correctness !== "all" && correctness(r.answer_f1) !== f.correctness) return false;
    if (r.support_f1 < f.sfMin - 1e-9 || r.support_f1 > f.sfMax + 1e-9) return false;
    if (f.answerability === "answerable" && !r.answerable) return false;
    if (f.answerability === "unanswerable" && r.answerable) return false;
    if (f.answerability === "mispredicted" && r.answerable === r.predicted_answerable) return false;
    if (f.search) {
      var hay = [r.id, r.question, r.predicted_answer].concat(r.gold_answers).join("\n").toLowerCase();
      if (hay.indexOf(f.search) < 0) return false;
    }
    return true;
  }
  function applyFilters(keepPage) {
    var f = readFilters();
    matched = [];
    for (var g = 0; g < GROUPS.length; g++) {
      if (GROUPS[g].some(function (row) { return rowMatches(ROWS[row], f); })) matched.push(g);
    }
    if (!keepPage) state.page = 0;
    render();
  }

  // ---- the view in the address (#answer=partial&hops=3,4&page=2): shareable, kept on reload ------------------
  function saveHash() {
    var f = readFilters(), params = new URLSearchParams();
    if (f.hops.size !== hopValues.length) params.set("hops", Array.from(f.hops).join(","));
    if (f.correctness !== "all") params.set("answer", f.correctness);
    if (f.sfMin !== 0 || f.sfMax !== 1) params.set("support", f.sfMin + "-" + f.sfMax);
    if (f.answerability !== "all") params.set("answerability", f.answerability);
    if (f.search) params.set("q", f.search);
    if ($("expand").checked) params.set("expand", "1");
    if (state.size !== 10) params.set("size", state.size);
    if (state.page) params.set("page", state.page + 1);
    try { history.replaceState(null, "", "#" + params.toString()); } catch (e) { /* some file:// views refuse */ }
  }
  function loadHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    if (params.has("hops")) {
      var hops = params.get("hops").split(",");
      document.querySelectorAll("#hops input").forEach(function (box) { box.checked = hops.indexOf(box.value) >= 0; });
    }
    if (params.has("answer")) $("correctness").value = params.get("answer");
    if (params.has("support")) {
      var range = params.get("support").split("-");
      $("sf-min").value = range[0]; $("sf-max").value = range[1] === undefined ? 1 : range[1];
    }
    if (params.has("answerability")) $("answerability").value = params.get("answerability");
    if (params.has("q")) $("search").value = params.get("q");
    $("expand").checked = params.get("expand") === "1";
    if (params.has("size")) state.size = Math.max(1, Number(params.get("size")) || 10);
    return params.has("page") ? Math.max(0, Number(params.get("page")) - 1 || 0) : 0;
  }

  // ---- pager ---------------------------------------------------------------------------------------------
  function pages() { return Math.max(1, Math.ceil(matched.length / state.size)); }
  function goTo(page) {
    state.page = Math.min(Math.max(0, page), pages() - 1);
    render();
    window.scrollTo(0, 0);
  }
  function pager(nav) {
    nav.replaceChildren();
    var first = el("button", null, "\u00ab first"), prev = el("button", null, "\u2039 prev");
    var next = el("button", null, "next \u203a"), last = el("button", null, "last \u00bb");
    first.type = prev.type = next.type = last.type = "button";
    first.onclick = function () { goTo(0); };
    prev.onclick = function () { goTo(state.page - 1); };
    next.onclick = function () { goTo(state.page + 1); };
    last.onclick = function () { goTo(pages() - 1); };
    first.disabled = prev.disabled = state.page === 0;
    next.disabled = last.disabled = state.page >= pages() - 1;
    var input = el("input");
    input.type = "number"; input.min = 1; input.max = pages(); input.value = state.page + 1;
    input.onchange = function () { goTo(Number(input.value) - 1); };
    var size = el("select");
    Array.from(new Set([5, 10, 25, 50, 100, state.size])).sort(function (a, b) { return a - b; }).forEach(function (n) {
      var option = el("option", null, n + " per page"); option.value = n; option.selected = n === state.size; add(size, option);
    });
    size.onchange = function () { state.size = Number(size.value); goTo(0); };
    var start = matched.length ? state.page * state.size + 1 : 0;
    var end = Math.min(matched.length, (state.page + 1) * state.size);
    var info = el("span", "muted", "questions " + start + "\u2013" + end + " of " + matched.length + " matching (" +
      GROUPS.length + " questions, " + ROWS.length + " rows)");
    add(nav, first, prev, el("span", null, "page"), input, el("span", null, "of " + pages()), next, last, size, info);
  }

  // ---- one question --------------------------------------------------------------------------------------
  function paragraphIndex(r) {
    var byIdx = {};
    r.paragraphs.forEach(function (p) { byIdx[p[0]] = p; });
    return byIdx;
  }
  function paragraphLabel(byIdx, idx) {
    if (idx === null || idx === undefined) return "\u2013";
    var p = byIdx[idx];
    return "P" + idx + (p ? ": " + T[p[1]] : "");
  }
  function table(headers, rows) {
    var t = el("table", "steps"), head = el("tr");
    headers.forEach(function (h) { add(head, el("th", null, h)); });
    add(t, head);
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (c) { add(tr, c instanceof Node ? add(el("td"), c) : el("td", null, c)); });
      add(t, tr);
    });
    return t;
  }
  function answerBlock(r) {
    var dl = el("dl", "answers");
    var golds = el("dd");
    r.gold_answers.forEach(function (a, i) {
      if (i) add(golds, el("span", "muted", " | "));
      add(golds, el("span", i ? "" : "gold-answer", a));
    });
    var pred = add(el("dd"), el("span", "pred-answer", r.predicted_answer === "" ? "(empty)" : r.predicted_answer));
    if (r.predicted_answer_confidence !== null && r.predicted_answer_confidence !== undefined)
      add(pred, el("span", "muted", "  confidence " + num(r.predicted_answer_confidence, 3)));
    var scores = add(el("dd"),
      badge("answer F1 " + num(r.answer_f1), scoreClass(r.answer_f1)), document.createTextNode(" "),
      badge("EM " + num(r.answer_em, 0)), document.createTextNode(" "),
      badge("support F1 " + num(r.support_f1), scoreClass(r.support_f1)), document.createTextNode(" "),
      badge("support EM " + num(r.support_em, 0)));
    var support = el("dd", null, "gold [" + r.gold_support_idxs.join(", ") + "]  predicted [" +
      r.predicted_support_idxs.join(", ") + "]");
    add(dl, el("dt", null, "gold"), golds, el("dt", null, "predicted"), pred, el("dt", null, "scores"), scores,
      el("dt", null, "support"), support);
    return dl;
  }
  function goldDecomposition(r, byIdx) {
    if (!r.decomposition.length) return null;
    return table(["#", "gold sub-question", "answer", "supporting paragraph"], r.decomposition.map(function (s, i) {
      return [String(i + 1), s.question, s.answer, paragraphLabel(byIdx, s.paragraph_support_idx)];
    }));
  }
  function executedSteps(r, byIdx) {
    if (!r.steps.length) return null;
    var gold = new Set(r.gold_support_idxs);
    return table(["#", "template", "asked", "answer", "confidence", "paragraph", "answerable"], r.steps.map(function (s) {
      var para = el("span", null, paragraphLabel(byIdx, s.paragraph));
      var cell = add(el("span"), para, s.paragraph !== null && s.paragraph !== undefined ?
        el("span", "tag " + (gold.has(s.paragraph) ? "gold" : "miss"), gold.has(s.paragraph) ? "gold" : "not gold") : null);
      return [String(s.step), s.template, s.question, s.answer, num(s.confidence, 3), cell, s.answerable ? "yes" : "no"];
    }));
  }
  function predictedDecomposition(d) {
    if (!d) return null;
    var box = el("div");
    add(box, el("h5", null, "predicted decomposition" + (d.invalid ? " (invalid)" : "")));
    if (d.steps && d.steps.length) {
      add(box, table(["#", "predicted sub-question"], d.steps.map(function (s, i) { return [String(i + 1), s === "" ? "(empty)" : s]; })));
    }
    add(box, el("div", "muted", "generated: " + d.predicted_text));
    if (d.problems && d.problems.length) add(box, el("div", "problems", "problems: " + d.problems.join("; ")));
    return box;
  }
  // a side file the predictor declared (run_files.write_side_file): each record of the row, field by field, as text
  function fieldText(value) {
    if (value === null || value === undefined) return "\u2013";
    if (typeof value === "string") return value === "" ? "(empty)" : value;
    if (Array.isArray(value) && value.every(function (v) { return typeof v !== "object" || v === null; })) {
      return value.length ? value.join("; ") : "(none)";
    }
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }
  function sideFiles(r) {
    if (!r.side_files || !r.side_files.length) return null;
    var box = el("div");
    r.side_files.forEach(function (entry) {
      add(box, el("h5", null, entry.title));
      entry.records.forEach(function (record) {
        add(box, table(["field", "value"], Object.keys(record).map(function (key) {
          return [key, fieldText(record[key])];
        })));
      });
    });
    return box;
  }
  function retrievedChain(c, byIdx) {
    if (!c) return null;
    var box = el("div");
    add(box, el("h5", null, "retrieved chain"));
    add(box, table(["hop", "paragraph", "score"], c.chain.map(function (idx, i) {
      var score = c.hop_scores[i];
      return [String(i + 1), paragraphLabel(byIdx, idx), score === null || score === undefined ? "-" : score.toFixed(3)];
    })));
    return box;
  }
  function selectedTopK(s, r, byIdx) {
    if (!s) return null;
    var read = s.ranking.slice(0, s.top_k), gold = new Set(r.gold_support_idxs);
    var found = read.filter(function (idx) { return gold.has(idx); }).length;
    var box = el("div");
    add(box, el("h5", null, "selector's top " + s.top_k + " (what the answerer read)"));
    add(box, el("div", "muted", "gold supporting paragraphs in it: " + found + " of " + gold.size));
    add(box, table(["rank", "paragraph", ""], read.map(function (idx, i) {
      return [String(i + 1), paragraphLabel(byIdx, idx), gold.has(idx) ? el("span", "tag gold", "gold") : ""];
    })));
    return box;
  }
  function paragraphs(r, expand) {
    var box = el("div"), gold = new Set(r.gold_support_idxs), pred = new Set(r.predicted_support_idxs);
    var rank = {};
    if (r.selection) r.selection.ranking.forEach(function (idx, i) { rank[idx] = i + 1; });
    r.paragraphs.forEach(function (p) {
      var isGold = gold.has(p[0]), isPred = pred.has(p[0]);
      var d = el("details", "para" + (isGold ? " gold" : "") + (isPred ? " pred" : ""));
      d.open = expand || isGold || isPred;
      var ranked = r.selection && rank[p[0]] !== undefined;
      var rankTag = !ranked ? null : rank[p[0]] <= r.selection.top_k ?
        el("span", "tag sel", "top " + r.selection.top_k + ": #" + rank[p[0]]) : el("span", "muted", " rank " + rank[p[0]]);
      var summary = add(el("summary"), el("span", "muted", "P" + p[0] + " "), el("span", "ptitle", T[p[1]]),
        isGold ? el("span", "tag gold", "gold") : null, isPred ? el("span", "tag pred", "predicted") : null, rankTag);
      add(d, summary, el("div", "ptext", T[p[2]]));
      add(box, d);
    });
    return box;
  }
  function panel(r, twin, expand) {
    var byIdx = paragraphIndex(r);
    var p = el("section", "panel");
    var head = el("h4");
    if (twin || !r.answerable || !r.predicted_answerable) {
      var right = r.answerable === r.predicted_answerable;
      add(head, badge(r.answerable ? "gold: answerable" : "gold: unanswerable"), document.createTextNode(" "),
        badge("predicted: " + (r.predicted_answerable ? "answerable" : "unanswerable"), right ? "ok" : "wrong"),
        document.createTextNode(" "));
    }
    if (twin) add(head, el("span", "muted", "row " + r.row));
    add(p, head.childNodes.length ? head : null, answerBlock(r));
    var gd = goldDecomposition(r, byIdx), ex = executedSteps(r, byIdx);
    if (gd) add(p, el("h5", null, "gold decomposition"), gd);
    add(p, predictedDecomposition(r.predicted_decomposition));
    add(p, sideFiles(r));
    add(p, retrievedChain(r.chain, byIdx));
    add(p, selectedTopK(r.selection, r, byIdx));
    if (ex) add(p, el("h5", null, "executed steps"), ex);
    add(p, el("h5", null, "paragraphs (" + r.paragraphs.length + ")"), paragraphs(r, expand));
    return p;
  }
  function card(group, expand) {
    var first = ROWS[group[0]];
    var article = el("article", "q");
    article.id = "q-" + first.id;
    add(article, add(el("header"), el("span", "qid", first.id), badge(first.num_hops + " hops"),
      group.length > 1 ? badge("twins: " + group.length + " rows") : el("span", null, "row " + first.row)));
    add(article, el("div", "question", first.question));
    var twins = el("div", "twins");
    twins.style.setProperty("--cols", String(group.length));
    group.forEach(function (row) { add(twins, panel(ROWS[row], group.length > 1, expand)); });
    add(article, twins);
    return article;
  }

  // ---- page ----------------------------------------------------------------------------------------------
  function render() {
    state.page = Math.min(state.page, pages() - 1);
    var expand = $("expand").checked;
    var main = $("questions");
    var slice = matched.slice(state.page * state.size, (state.page + 1) * state.size);
    main.replaceChildren.apply(main, slice.map(function (g) { return card(GROUPS[g], expand); }));
    if (!slice.length) add(main, el("div", "empty", "no question matches the filters"));
    pager($("pager-top"));
    pager($("pager-bottom"));
    saveHash();
  }
  function header() {
    $("title").textContent = (DATA.model || "run") + " on " + DATA.dataset + " " + DATA.split;
    $("run").textContent = DATA.run + (DATA.metrics_file ? "  \u00b7  metrics: " + DATA.metrics_file : "");
    var names = Object.keys(DATA.metrics).filter(function (k) { return !/_\dhop$/.test(k); });
    if (!names.length) return;
    var t = $("metrics"), head = el("tr");
    add(head, el("th", null, "metric"), el("th", null, "all"), el("th", null, "2hop"), el("th", null, "3hop"), el("th", null, "4hop"));
    add(t, head);
    names.forEach(function (name) {
      var tr = add(el("tr"), el("td", null, name));
      ["", "_2hop", "_3hop", "_4hop"].forEach(function (suffix) {
        var v = DATA.metrics[name + suffix];
        var isCount = /count$/.test(name) || DATA.count_metrics.indexOf(name) >= 0;
        var scale = name === "decomposition_bleu" ? 1 : 100;
        add(tr, el("td", null, v === undefined ? "" : isCount ? Number(v).toFixed(0) : (scale * v).toFixed(1)));
      });
      add(t, tr);
    });
  }
  function init() {
    header();
    hopValues.forEach(function (h) {
      var label = el("label"), box = el("input");
      box.type = "checkbox"; box.value = h; box.checked = box.defaultChecked = true;
      add(label, box, document.createTextNode(" " + h + " "));
      add($("hops"), label);
    });
    if (!hasUnanswerable) $("answerability-box").style.display = "none";
    ["correctness", "sf-min", "sf-max", "answerability", "expand"].forEach(function (id) {
      $(id).addEventListener("change", function () { applyFilters(id === "expand"); });
    });
    $("hops").addEventListener("change", function () { applyFilters(false); });
    $("search").addEventListener("input", function () { applyFilters(false); });
    $("reset").onclick = function () { $("filters").reset(); applyFilters(false); };
    document.addEventListener("keydown", function (e) {
      if (e.target && /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName)) return;
      if (e.key === "ArrowRight") goTo(state.page + 1);
      if (e.key === "ArrowLeft") goTo(state.page - 1);
    });
    state.page = loadHash();
    applyFilters(true);
  }
  init();
})();
