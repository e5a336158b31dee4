(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var samples = [];
  var current = null; // the sample question shown, or null for the user's own

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text); // always text: never parsed as HTML
    return node;
  }
  function paragraphsText(paragraphs) {
    return paragraphs.map(function (p) { return (p.title ? p.title + "\n" : "") + p.text; }).join("\n\n");
  }
  function parseParagraphs(text) {
    return text.split(/\n\s*\n/).map(function (block) { return block.replace(/^\n+|\n+$/g, ""); })
      .filter(function (block) { return block.length; })
      .map(function (block) {
        var lines = block.split("\n");
        return lines.length > 1 ? { title: lines[0], text: lines.slice(1).join("\n") } : { title: "", text: lines[0] };
      });
  }
  function showAnswer(answer, paragraphs) {
    $("error").textContent = "";
    $("answer").textContent = answer.answer === "" ? "(empty)" : answer.answer;
    $("confidence").textContent = Number(answer.confidence).toFixed(3);
    $("answerable").textContent = answer.answerable ? "yes" : "no";
    $("gold").textContent = current ? current.gold.answer : "\u2013";
    $("support").textContent = answer.support_titles.map(function (title, i) {
      return title || "paragraph " + (answer.support_idxs[i] + 1);
    }).join("; ") || "(none)";
    var chain = $("chain");
    chain.replaceChildren();
    (answer.steps || []).forEach(function (step) {
      chain.appendChild(el("li", "step", (step.question || "") + " \u2192 " + (step.answer || "")));
    });
    if (!(answer.steps || []).length && answer.chain) {
      answer.chain.forEach(function (idx) { chain.appendChild(el("li", "hop", paragraphs[idx] ? paragraphs[idx].title : idx)); });
    }
    $("chain-title").hidden = chain.children.length === 0;
    var support = new Set(answer.support_idxs);
    var gold = new Set(current ? current.gold.support_idxs : []);
    var box = $("shown-paragraphs");
    box.replaceChildren();
    paragraphs.forEach(function (p, idx) {
      var cls = "paragraph" + (support.has(idx) ? " support" : "") + (gold.has(idx) ? " gold" : "");
      var node = el("div", cls);
      node.dataset.idx = String(idx);
      node.appendChild(el("div", "title", p.title || "(no title)"));
      node.appendChild(el("div", "text", p.text));
      box.appendChild(node);
    });
    $("result").hidden = false;
  }
  function ask() {
    var paragraphs = parseParagraphs($("paragraphs").value);
    var question = $("question").value;
    if (current && (question !== current.question || paragraphsText(current.paragraphs) !== $("paragraphs").value)) current = null;
    $("answer-button").disabled = true;
    fetch("/predict", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ question: question, paragraphs: paragraphs }) })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        if (body.error) { $("error").textContent = body.error; $("result").hidden = true; }
        else showAnswer(body, paragraphs);
      })
      .catch(function (error) { $("error").textContent = String(error); })
      .finally(function () { $("answer-button").disabled = false; });
  }
  function pick() {
    var chosen = $("sample").value;
    current = chosen === "" ? null : samples[Number(chosen)];
    if (current) {
      $("question").value = current.question;
      $("paragraphs").value = paragraphsText(current.paragraphs);
    }
  }
  $("ask").addEventListener("submit", ask);
  $("sample").addEventListener("change", pick);
  fetch("/samples").then(function (response) { return response.json(); }).then(function (found) {
    samples = found;
    found.forEach(function (sample, position) {
      var option = el("option", null, sample.question);
      option.value = String(position);
      $("sample").appendChild(option);
    });
    document.body.dataset.ready = "true";
  });
})();
