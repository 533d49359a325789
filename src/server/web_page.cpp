#include "server/web_page.h"

namespace leoam::server {

std::string_view web_page_html() {
  return R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>leoam</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem; color: #1d232a; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
  p.sub { margin: 0 0 1rem; color: #5b6570; }
  label { display: block; font-weight: 600; margin: .8rem 0 .3rem; }
  textarea, input[type=text], input[type=password] { width: 100%; box-sizing: border-box; font: inherit; padding: .45rem; border: 1px solid #b9c2cc; border-radius: 4px; }
  textarea { height: 12rem; font-family: ui-monospace, monospace; font-size: 13px; }
  .row { display: flex; gap: .8rem; align-items: center; flex-wrap: wrap; margin-top: .8rem; }
  .row input[type=number] { width: 6rem; font: inherit; padding: .3rem; }
  button { font: inherit; padding: .45rem 1.2rem; border: 0; border-radius: 4px; background: #1f6feb; color: white; cursor: pointer; }
  button:disabled { background: #8aa9d6; cursor: default; }
  #answer { white-space: pre-wrap; min-height: 3rem; padding: .7rem; margin-top: .8rem; border: 1px solid #d5dbe1; border-radius: 4px; background: #f6f8fa; }
  #figures { margin-top: .6rem; color: #39424c; font-size: 13px; }
  #figures span { display: inline-block; margin-right: 1.2rem; }
  .error { color: #b42318; }
</style>
</head>
<body>
<h1>leoam</h1>
<p class="sub">Paste or upload a long document once, then ask questions about it. Its KV is kept (on disk with
<code>--kv-dir</code>) and reused by every later question.</p>
<label for="doc">Document</label>
<textarea id="doc" placeholder="Paste the document here"></textarea>
<div class="row"><input type="file" id="file" accept=".txt,.md,text/*"> <span id="doclen"></span></div>
<label for="question">Question</label>
<input type="text" id="question" placeholder="What is the document about?">
<div class="row">
  <span>max tokens <input type="number" id="max" value="128" min="1"></span>
  <span>temperature <input type="number" id="temp" value="0" min="0" max="2" step="0.1"></span>
  <span>API key <input type="password" id="key" style="width:10rem"></span>
  <button id="ask">Ask</button>
</div>
<div id="answer" aria-live="polite"></div>
<div id="figures"></div>
<script>
const $ = (id) => document.getElementById(id);
const fmtBytes = (n) => n >= 1e9 ? (n / 1e9).toFixed(2) + " GB" : n >= 1e6 ? (n / 1e6).toFixed(1) + " MB"
                     : n >= 1e3 ? (n / 1e3).toFixed(1) + " kB" : n + " B";
function showLength() { $("doclen").textContent = $("doc").value.length + " characters"; }
$("doc").addEventListener("input", showLength);
$("file").addEventListener("change", async () => {
  const f = $("file").files[0];
  if (f) { $("doc").value = await f.text(); showLength(); }
});
$("key").value = localStorage.getItem("leoam-key") || "";

function prompt() {
  const doc = $("doc").value.trim();
  const q = $("question").value.trim();
  return doc ? doc + "\n\nQuestion: " + q + "\nAnswer:" : q;
}

function showFigures(last) {
  const u = last.usage || {}, l = last.leoam || {};
  const reused = (u.prompt_tokens_details || {}).cached_tokens || 0;
  const read = l.kv_bytes_read || {};
  const parts = [
    ["prompt", (u.prompt_tokens || 0) + " tokens"],
    ["reused", reused + " tokens"],
    ["answer", (u.completion_tokens || 0) + " tokens"],
    ["KV attended", l.kv_attended === undefined ? "-" : (100 * l.kv_attended).toFixed(1) + "%"],
    ["read", "device " + fmtBytes(read.device || 0) + ", host " + fmtBytes(read.host || 0) + ", disk " + fmtBytes(read.disk || 0)],
    ["prefill", (l.prefill_ms || 0).toFixed(0) + " ms"],
    ["decode", (l.decode_ms || 0).toFixed(0) + " ms"],
  ];
  $("figures").innerHTML = "";
  for (const [k, v] of parts) {
    const s = document.createElement("span");
    s.id = "fig-" + k.replace(/ /g, "-").toLowerCase();
    s.textContent = k + ": " + v;
    $("figures").appendChild(s);
  }
}

async function ask() {
  $("ask").disabled = true;
  $("answer").textContent = "";
  $("answer").classList.remove("error");
  $("figures").textContent = "";
  localStorage.setItem("leoam-key", $("key").value);
  const headers = { "Content-Type": "application/json" };
  if ($("key").value) headers["Authorization"] = "Bearer " + $("key").value;
  try {
    const res = await fetch("/v1/completions", { method: "POST", headers, body: JSON.stringify({
      prompt: prompt(), max_tokens: Number($("max").value), temperature: Number($("temp").value), stream: true }) });
    if (!res.ok) throw new Error(((await res.json()).error || {}).message || res.statusText);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        const chunk = JSON.parse(event.slice(6));
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.choices && chunk.choices.length) $("answer").textContent += chunk.choices[0].text;
        if (chunk.usage) showFigures(chunk);
      }
    }
    $("answer").dataset.done = "1";
  } catch (e) {
    $("answer").classList.add("error");
    $("answer").textContent = "Error: " + e.message;
  } finally {
    $("ask").disabled = false;
  }
}
$("ask").addEventListener("click", ask);
$("question").addEventListener("keydown", (e) => { if (e.key === "Enter") ask(); });

// ?doc=...&q=...&ask=1 fills the form and asks at once (links, and the page's own test).
const params = new URLSearchParams(location.search);
if (params.has("doc")) { $("doc").value = params.get("doc"); showLength(); }
if (params.has("q")) $("question").value = params.get("q");
if (params.has("max")) $("max").value = params.get("max");
if (params.get("ask") === "1") ask();
</script>
</body>
</html>
)html";
}

}  // namespace leoam::server
