// GET /: the service's web page, plain HTML and JavaScript served by the binary (no build step,
// nothing fetched from elsewhere). Upload a PDF or page images, watch each page's Markdown arrive
// (the job's events) with a progress bar, see it rendered next to the page image, download the
// result. The model's text is escaped before it is rendered: only a few table tags come back.
#pragma once

namespace uocr_serve {

inline constexpr const char* kWebPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>uocr</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f4f5f7; }
  header { background: #1d2330; color: #fff; padding: 12px 24px; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0 12px 0 0; }
  header input[type=password] { width: 14em; }
  button, .button { background: #3563e9; color: #fff; border: 0; border-radius: 4px; padding: 6px 14px; cursor: pointer; text-decoration: none; font-size: 14px; }
  button:disabled { background: #8a94a8; cursor: default; }
  main { padding: 16px 24px; }
  #status { display: flex; gap: 16px; align-items: center; margin-bottom: 16px; }
  progress { width: 320px; height: 14px; }
  #error { color: #b3261e; white-space: pre-wrap; }
  .page { display: grid; grid-template-columns: minmax(200px, 1fr) 2fr; gap: 16px; background: #fff; border-radius: 6px;
          padding: 12px; margin-bottom: 16px; box-shadow: 0 1px 2px #0002; }
  .page img { width: 100%; border: 1px solid #ddd; }
  .page h2 { font-size: 13px; color: #6b7385; margin: 0 0 8px; font-weight: normal; }
  .markdown table { border-collapse: collapse; } .markdown td, .markdown th { border: 1px solid #bbb; padding: 2px 6px; }
  .markdown:empty::before { content: "waiting for the model"; color: #9aa1b1; font-style: italic; }
</style>
</head>
<body>
<header>
  <h1>uocr</h1>
  <input id="files" type="file" accept=".pdf,application/pdf,image/*" multiple>
  <label>mode <select id="mode"><option>base</option><option>gundam</option></select></label>
  <input id="key" type="password" placeholder="API key (if the server needs one)" autocomplete="off">
  <button id="start">Transcribe</button>
  <button id="cancel" disabled>Cancel</button>
</header>
<main>
  <div id="status"><progress id="progress" value="0" max="1"></progress><span id="state">idle</span>
    <span id="counts"></span><a id="download" class="button" hidden download="transcript.md">Download Markdown</a></div>
  <div id="error"></div>
  <div id="pages"></div>
</main>
<script>
"use strict";
const $ = (s) => document.querySelector(s);
const keyField = $("#key");
keyField.value = localStorage.getItem("uocr-key") || "";
keyField.addEventListener("change", () => localStorage.setItem("uocr-key", keyField.value));
const auth = () => keyField.value.trim() ? { "Authorization": "Bearer " + keyField.value.trim() } : {};
let job = null, controller = null;

function escapeHtml(t) {
  return t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function inline(t) {
  return t.replace(/`([^`]+)`/g, "<code>$1</code>").replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
          .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
}
// A small Markdown renderer over escaped text: headings, lists, paragraphs, emphasis, code, and
// the table tags the model writes (without attributes).
function renderMarkdown(md) {
  const safe = escapeHtml(md).replace(/&lt;(\/?)(table|thead|tbody|tr|td|th)&gt;/g, "<$1$2>").replace(/&lt;br\s*\/?&gt;/g, "<br>");
  const out = [];
  let para = [], list = null;
  const flush = () => {
    if (para.length) out.push("<p>" + inline(para.join(" ")) + "</p>");
    para = [];
    if (list) { out.push("</" + list + ">"); list = null; }
  };
  for (const line of safe.split("\n")) {
    let m;
    if (!line.trim()) { flush(); continue; }
    if ((m = line.match(/^(#{1,6})\s+(.*)$/))) { flush(); out.push(`<h${m[1].length}>${inline(m[2])}</h${m[1].length}>`); continue; }
    if ((m = line.match(/^\s*([-*+]|\d+\.)\s+(.*)$/))) {
      const kind = /\d/.test(m[1]) ? "ol" : "ul";
      if (para.length) { out.push("<p>" + inline(para.join(" ")) + "</p>"); para = []; }
      if (list !== kind) { if (list) out.push("</" + list + ">"); out.push("<" + kind + ">"); list = kind; }
      out.push("<li>" + inline(m[2]) + "</li>");
      continue;
    }
    if (/^\s*<(\/?)(table|thead|tbody|tr|td|th)>/.test(line)) { flush(); out.push(line); continue; }
    if (list) { out.push("</" + list + ">"); list = null; }
    para.push(line);
  }
  flush();
  return out.join("\n");
}
// The Markdown of each page: "<PAGE>" stands on a line of its own before every page.
function splitPages(md) {
  const pages = md.split(/(?:^|\n)<PAGE>(?:\n|$)/);
  if (pages.length > 1 && pages[0] === "") pages.shift();
  return pages;
}

function showError(message) { $("#error").textContent = message; }

async function api(path, options = {}) {
  const r = await fetch(path, Object.assign({}, options, { headers: Object.assign(auth(), options.headers || {}) }));
  if (!r.ok) {
    let message = r.status + " " + r.statusText;
    try { message = (await r.json()).error.message; } catch (e) {}
    throw new Error(message);
  }
  return r;
}

function makePages(total) {
  const box = $("#pages");
  box.innerHTML = "";
  for (let i = 0; i < total; i++) {
    const div = document.createElement("div");
    div.className = "page";
    div.innerHTML = `<div><h2>page ${i + 1}</h2><img alt="page ${i + 1}"></div><div><h2>Markdown</h2><div class="markdown"></div></div>`;
    box.appendChild(div);
    api(`/v1/jobs/${job}/pages/${i}/image`).then((r) => r.blob())
      .then((b) => { div.querySelector("img").src = URL.createObjectURL(b); }).catch(() => {});
  }
}

function showText(md) {
  const panes = document.querySelectorAll("#pages .markdown");
  splitPages(md).forEach((page, i) => { if (i < panes.length) panes[i].innerHTML = renderMarkdown(page); });
}

function showStatus(s) {
  $("#progress").max = Math.max(1, s.pages_total);
  $("#progress").value = s.pages_done;
  $("#state").textContent = s.state;
  $("#counts").textContent = `${s.pages_done} / ${s.pages_total} pages, ${s.tokens} tokens`;
  if (s.error) showError(s.error.message);
}

async function follow() {
  controller = new AbortController();
  const r = await api(`/v1/jobs/${job}/events`, { signal: controller.signal });
  const reader = r.body.getReader(), decoder = new TextDecoder();
  let buffer = "", text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (!data) continue;
      const payload = JSON.parse(data);
      if (name === "status" || name === "end") showStatus(payload);
      if (name === "text") { text += payload.text; showText(text); }
      if (name === "page") { $("#progress").value = payload.pages_done; }
      if (name === "end") return payload;
    }
  }
}

async function finish(status) {
  $("#cancel").disabled = true;
  $("#start").disabled = false;
  if (status && status.state !== "failed") {
    const r = await api(`/v1/jobs/${job}/result`);
    const text = await r.text();
    showText(text);
    const a = $("#download");
    a.href = URL.createObjectURL(new Blob([text], { type: "text/markdown" }));
    a.hidden = false;
  }
}

$("#start").addEventListener("click", async () => {
  const files = $("#files").files;
  showError("");
  if (!files.length) { showError("Choose a PDF or page images first."); return; }
  const form = new FormData();
  for (const f of files) form.append("file", f, f.name);
  form.append("mode", $("#mode").value);
  $("#start").disabled = true;
  $("#download").hidden = true;
  try {
    const r = await api("/v1/jobs", { method: "POST", body: form });
    const s = await r.json();
    job = s.id;
    makePages(s.pages_total);
    showStatus(s);
    $("#cancel").disabled = false;
    await finish(await follow());
  } catch (e) {
    if (e.name !== "AbortError") showError(e.message);
    $("#start").disabled = false;
    $("#cancel").disabled = true;
  }
});

$("#cancel").addEventListener("click", async () => {
  if (!job) return;
  try { showStatus(await (await api(`/v1/jobs/${job}`, { method: "DELETE" })).json()); } catch (e) { showError(e.message); }
});
</script>
</body>
</html>
)html";

}  // namespace uocr_serve
