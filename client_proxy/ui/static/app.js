// The memory browser: a hash-routed page over the local JSON API (/api/*). No third-party code; text from the
// server only ever reaches the page as text nodes (never as HTML).
"use strict";

const state = { info: null, files: null, by: "folder", file: null, editing: false, hits: [], flash: null };
const main = () => document.getElementById("main");
const readOnly = () => state.info?.access === "r";  // this device may only read the index: no change is offered

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

const JSON_POST = { method: "POST", headers: { "content-type": "application/json" } };
const post = (route, body) => api(`/api/${route}`, { ...JSON_POST, body: JSON.stringify(body) });

async function api(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (!response.ok) throw new Error((body && body.error) || `HTTP ${response.status}`);
  return body;
}

function query(params) {
  return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();
}

function when(iso) {
  if (!iso) return "";
  const then = new Date(iso);
  const seconds = (Date.now() - then.getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return then.toISOString().slice(0, 16).replace("T", " ");
}
const stamp = (iso) => (iso ? el("time", { datetime: iso, title: iso, text: when(iso) }) : null);
const whoWhen = (item) => [item.updated_by ? `by ${item.updated_by}` : null, item.updated_at ? stamp(item.updated_at) : null]
  .filter(Boolean).flatMap((part, i) => (i ? [" · ", part] : [part]));

function show(...nodes) {
  const target = main();
  target.replaceChildren(...nodes.flat().filter((node) => node !== null && node !== undefined && node !== false));
  target.scrollTop = 0;
}
function failure(error) { return el("div", { class: "banner bad", role: "alert" }, el("strong", { text: "Could not load" }), el("p", { text: error.message })); }

// ---- routing ------------------------------------------------------------------------------------------------
// Each navigation starts a view; a view whose answer arrives after a later navigation drops it (the slower
// answer must not paint over the page the user went to).
let navigation = 0;
const superseded = (mine) => mine !== navigation;

function route() {
  navigation += 1;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, search] = hash.split("?");
  const params = Object.fromEntries(new URLSearchParams(search || ""));
  const view = path.replace(/^\//, "") || "search";
  const lit = view === "history" && params.path ? "file" : view;  // one file's history is not the deleted files
  for (const link of document.querySelectorAll(".views a")) {
    link.toggleAttribute("aria-current", link.dataset.view === lit);
    if (link.dataset.view === lit) link.setAttribute("aria-current", "page");
  }
  state.editing = false;
  if (view === "file") return viewFile(params.path, params.l, params.v);
  if (view === "new") return viewNew();
  if (view === "history") return params.path ? viewHistory(params.path, params.before) : viewDeleted(params.before);
  if (view === "sync") return viewSync();
  if (view === "index") return viewIndex();
  document.getElementById("q").value = params.q || "";
  return params.q ? viewSearch(params.q) : viewHome();
}

// ---- search -------------------------------------------------------------------------------------------------
async function viewSearch(q) {
  show(el("p", { class: "summary", text: `Searching for “${q}”…` }));
  try {
    const mine = navigation;
    const result = await api(`/api/search?${query({ q, max: 20 })}`);
    if (superseded(mine)) return;
    state.hits = result.hits;
    const summary = el("p", { class: "summary" },
      `${result.hits.length} hit${result.hits.length === 1 ? "" : "s"} · `, el("strong", { text: `${result.search_mode} search` }),
      result.index_updated_at ? [" · index updated ", stamp(result.index_updated_at)] : [],
      result.pending_files ? ` · ${result.pending_files} files waiting to be indexed` : "");
    const notice = result.notice ? el("div", { class: "banner warn" }, el("p", { text: result.notice })) : null;
    const list = el("ol", { class: "hits", "aria-label": "Search results" }, result.hits.map(hitItem));
    show(summary, notice, result.hits.length ? list : el("p", { class: "empty", text: "Nothing found. Try other words." }));
  } catch (error) { show(failure(error)); }
}

function hitItem(hit) {
  const href = `#/file?${query({ path: hit.path, l: `${hit.start_line}-${hit.end_line}` })}`;
  return el("li", { class: "hit" }, el("a", { href, class: "hit-link" },
    el("div", { class: "hit-top" },
      el("span", { class: "score", title: "relevance, 0 to 1", text: hit.score.toFixed(2) }),
      el("span", { class: "cite", text: hit.citation }),
      el("span", { class: "heading", text: hit.heading || "" })),
    el("pre", { class: "snippet", text: hit.snippet }),
    el("div", { class: "hit-meta" }, whoWhen(hit), el("span", { class: "pill", text: `matched by ${hit.matched_by}` }),
      hit.source === "sessions" ? el("span", { class: "pill", text: "session" }) : null)));
}

async function viewHome() {
  const mine = navigation;
  const files = await loadFiles().catch(() => []);
  if (superseded(mine)) return;
  const recent = [...files].filter((f) => f.updated_at).sort((a, b) => b.updated_at.localeCompare(a.updated_at)).slice(0, 8);
  show(el("h1", { text: "Search your memory" }),
    el("p", { class: "muted" }, "Type in the box above and press Enter (", el("kbd", { text: "/" }), " jumps there). ",
      "Hybrid search finds passages by meaning and by keyword."),
    el("h2", { text: "Recently changed" }),
    recent.length ? el("ul", { class: "plain" }, recent.map((f) => el("li", {},
      el("a", { class: "mono", href: `#/file?${query({ path: f.path })}`, text: f.path }), "  ",
      el("span", { class: "muted" }, whoWhen(f))))) : el("p", { class: "empty", text: "No memory files yet." }));
}

// ---- files --------------------------------------------------------------------------------------------------
async function loadFiles(force) {
  if (!state.files || force) {
    state.files = (await api("/api/files")).files;
    renderTree();
  }
  return state.files;
}

const DAY = /(^|\/)(\d{4}-\d{2}-\d{2})\.md$/;
function renderTree() {
  const tree = document.getElementById("tree");
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const files = (state.files || []).filter((f) => !filter || f.path.toLowerCase().includes(filter));
  const current = state.file && state.file.path;
  const link = (f, label, aside) => el("li", { class: f.path.includes(".conflict-") ? "conflict" : null },
    el("a", { href: `#/file?${query({ path: f.path })}`, title: f.path, "aria-current": f.path === current ? "page" : null },
      el("span", { text: label }), aside ? el("span", { class: "aside", text: aside }) : null));
  if (state.by === "day") {
    const days = files.map((f) => [f, DAY.exec(f.path)]).filter(([, m]) => m).sort((a, b) => b[1][2].localeCompare(a[1][2]));
    const months = new Map();
    for (const [f, m] of days) {
      const month = m[2].slice(0, 7);
      if (!months.has(month)) months.set(month, []);
      const weekday = new Date(`${m[2]}T12:00:00Z`).toLocaleDateString("en", { weekday: "short", timeZone: "UTC" });
      months.get(month).push(link(f, `${m[2]} ${weekday}`, `${f.lines} lines`));
    }
    tree.replaceChildren(...(days.length ? [...months].flatMap(([month, items]) => [el("div", { class: "group", text: month }), el("ul", {}, items)])
      : [el("p", { class: "muted", text: "No daily logs." })]));
    return;
  }
  const root = { folders: new Map(), files: [] };
  for (const f of files) {
    const parts = f.path.split("/");
    let node = root;
    for (const part of parts.slice(0, -1)) {
      if (!node.folders.has(part)) node.folders.set(part, { folders: new Map(), files: [] });
      node = node.folders.get(part);
    }
    node.files.push([parts[parts.length - 1], f]);
  }
  const render = (node) => el("ul", {},
    [...node.folders].sort(([a], [b]) => a.localeCompare(b)).map(([name, child]) =>
      el("li", {}, el("details", { open: true }, el("summary", { text: `${name}/` }), render(child)))),
    node.files.sort(([a], [b]) => a.localeCompare(b)).map(([name, f]) => link(f, name)));
  tree.replaceChildren(files.length ? render(root) : el("p", { class: "muted", text: filter ? "No file matches." : "No files." }));
}

async function viewFile(path, lines, version) {
  show(el("p", { class: "summary", text: `Opening ${path}…` }));
  try {
    const mine = navigation;
    const file = await api(`/api/file?${query({ path, v: version })}`);
    if (superseded(mine)) return;
    state.file = file;
    renderTree();
    const flash = state.flash;  // a banner from the view that led here (a new note saved)
    state.flash = null;
    renderFile(lines, flash);
  } catch (error) { show(failure(error)); }
}

function renderFile(lines, banner) {
  const file = state.file;
  const [first, last] = (lines || "").split("-").map(Number);
  const rows = file.exists ? file.content.replace(/\n$/, "").split("\n").map((text, i) => {
    const n = i + 1;
    const lit = first && n >= first && n <= (last || first);
    return el("div", { class: lit ? "row hl" : "row", id: `L${n}` },
      el("a", { class: "ln", href: `#/file?${query({ path: file.path, l: n })}`, tabindex: "-1", text: n }),
      el("span", { class: "text", text: text }));
  }) : [];
  const editable = file.editable && file.source === "memory" && !readOnly();
  const past = file.version ? el("div", { class: "banner warn", role: "status", id: "past" },
    el("strong", { text: `Version ${file.version}, read only` }),
    el("p", {}, "Restoring makes it the current text again, as a new version (itself undoable). ",
      el("a", { href: `#/file?${query({ path: file.path })}`, text: "Current version" })),
    el("div", { class: "actions" }, el("button", { class: "primary", id: "restore", type: "button",
      onclick: (event) => restoreFile(file.path, file.version, event.target), text: "Restore this version" }))) : null;
  const meta = el("div", { class: "muted" }, file.exists ? `${file.total_lines} lines · ` : "not on the server · ", whoWhen(file),
    file.hash ? el("span", { class: "mono", title: file.hash, text: ` · ${file.hash.slice(0, 10)}` }) : null);
  const actions = el("div", { class: "actions" },
    file.source === "memory" ? el("a", { class: "button plain", id: "history", href: `#/history?${query({ path: file.path })}`, text: "History" }) : null,
    editable && file.exists ? el("button", { class: "plain", id: "delete", type: "button", onclick: askDelete, text: "Delete" }) : null,
    editable ? el("button", { class: "primary", id: "edit", type: "button", onclick: startEdit, text: file.exists ? "Edit" : "Create" }) : null);
  show(el("article", { class: "file" },
    el("header", { class: "file-head" }, el("div", {}, el("h1", { class: "path", text: file.path }), meta), actions),
    el("div", { id: "banner" }, banner || past),
    file.exists ? el("div", { class: "code", role: "region", "aria-label": `${file.path} with line numbers` }, rows)
      : el("p", { class: "empty", text: "This file does not exist (or was deleted)." })));
  if (first) document.getElementById(`L${first}`)?.scrollIntoView({ block: "center" });
}

function startEdit() {
  const file = state.file;
  if (!file || !file.editable || file.source !== "memory" || readOnly()) return;
  state.editing = true;
  const editor = el("textarea", { class: "editor", id: "editor", spellcheck: "false", "aria-label": `Edit ${file.path}` });
  editor.value = file.content;
  const save = el("button", { class: "primary", id: "save", type: "button", onclick: () => saveEdit(editor, save), text: "Save" });
  const cancel = el("button", { class: "plain", type: "button", onclick: stopEdit, text: "Cancel" });
  show(el("article", { class: "file" },
    el("header", { class: "file-head" },
      el("div", {}, el("h1", { class: "path", text: file.path }),
        el("div", { class: "muted", text: "Editing. Saving sends it like a laptop's sync: merged with others' changes, never over them." })),
      el("div", { class: "actions" }, cancel, save)),
    el("div", { id: "banner" }), editor));
  editor.focus();
}

function stopEdit() {
  state.editing = false;
  if (state.file) renderFile();
  else location.hash = "#/";  // a new note given up
}

const notSaved = (why) => el("div", { class: "banner bad", role: "alert" },
  el("strong", { text: "Not saved" }), el("p", { text: why }), el("p", { text: "Your text is still in the editor." }));

async function saveEdit(editor, button) {
  const file = state.file;
  button.disabled = true;
  try {
    const result = await post("save", { path: file.path, base: file.exists ? file.hash : null, content: editor.value });
    if (result.status === "rejected") {
      document.getElementById("banner").replaceChildren(notSaved(result.message || "the server refused the text"));
      return;
    }
    state.editing = false;
    state.file = await api(`/api/file?${query({ path: file.path })}`);
    loadFiles(true).catch(() => null);
    renderFile(null, saveBanner(result));
  } catch (error) {
    document.getElementById("banner").replaceChildren(notSaved(`${error.message}.`));
  } finally { button.disabled = false; }
}

// ---- a new note, a deletion and its undo ----------------------------------------------------------------------
function viewNew() {
  state.file = null;
  if (readOnly()) return show(el("p", { class: "empty", text: `This device may only read index ${state.info.index}.` }));
  state.editing = true;
  const path = el("input", { id: "new-path", class: "mono", type: "text", spellcheck: "false", autocomplete: "off",
    value: "memory/notes/", "aria-label": "Path of the new note" });
  const editor = el("textarea", { class: "editor", id: "editor", spellcheck: "false", "aria-label": "Text of the new note" });
  const save = el("button", { class: "primary", id: "save", type: "button", onclick: () => saveNew(path, editor, save), text: "Save" });
  const cancel = el("button", { class: "plain", type: "button", onclick: stopEdit, text: "Cancel" });
  show(el("article", { class: "file" },
    el("header", { class: "file-head" },
      el("div", {}, el("h1", { text: "New note" }),
        el("div", { class: "muted", text: "A path under memory/ ending in .md (or MEMORY.md). Saving sends it to every laptop." })),
      el("div", { class: "actions" }, cancel, save)),
    el("label", { class: "field" }, el("span", { text: "Path" }), path),
    el("div", { id: "banner" }), editor));
  path.focus();
  path.setSelectionRange(path.value.length, path.value.length);
}

async function saveNew(path, editor, button) {
  const target = path.value.trim();
  button.disabled = true;
  try {
    // base null: a new file. If one exists there meanwhile, the server keeps it and saves this text as a copy.
    const result = await post("save", { path: target, base: null, content: editor.value });
    if (result.status === "rejected") {
      document.getElementById("banner").replaceChildren(notSaved(result.message || "the server refused the note"));
      return;
    }
    state.editing = false;
    state.flash = saveBanner(result);
    loadFiles(true).catch(() => null);
    location.hash = `#/file?${query({ path: result.path || target })}`;
  } catch (error) {
    document.getElementById("banner").replaceChildren(notSaved(`${error.message}.`));
  } finally { button.disabled = false; }
}

function askDelete() {
  const file = state.file;
  if (!file || !file.exists) return;
  document.getElementById("banner").replaceChildren(el("div", { class: "banner warn", role: "alert", id: "confirm-delete" },
    el("strong", { text: `Delete ${file.path} on every laptop?` }),
    el("p", { text: "Its versions stay in the history: Undo brings it back right after, memory-proxy restore any time later." }),
    el("div", { class: "actions" },
      el("button", { class: "plain", type: "button", onclick: () => renderFile(), text: "Keep it" }),
      el("button", { class: "danger", id: "confirm", type: "button", onclick: (event) => deleteFile(event.target), text: "Delete" }))));
  document.getElementById("confirm").focus();
}

async function deleteFile(button) {
  const file = state.file;
  button.disabled = true;
  try {
    // The hash shown: the server refuses if someone changed the file since, rather than delete unseen text.
    const result = await post("delete", { path: file.path, hash: file.hash });
    state.file = await api(`/api/file?${query({ path: file.path })}`);
    loadFiles(true).catch(() => null);
    renderFile(null, deletedBanner(result));
  } catch (error) {
    document.getElementById("banner").replaceChildren(el("div", { class: "banner bad", role: "alert" },
      el("strong", { text: "Not deleted" }), el("p", { text: `${error.message}. Open the file again to see its text now.` })));
  }
}

function deletedBanner(result) {
  if (!result.deleted) return el("div", { class: "banner warn", role: "status" }, el("strong", { text: "It was already deleted." }));
  const undo = result.restore_version ? el("button", { class: "plain", id: "undo", type: "button",
    onclick: (event) => restoreFile(result.path, result.restore_version, event.target), text: "Undo" }) : null;
  return el("div", { class: "banner ok", role: "status", id: "deleted" }, el("strong", { text: "Deleted on every laptop." }),
    el("p", {}, "Its versions stay in the history. ", undo));
}

async function restoreFile(path, version, button) {
  button.disabled = true;
  try {
    const result = await post("restore", { path, version });
    state.flash = el("div", { class: "banner ok", role: "status", id: "restored" }, el("strong", { text: "Restored." }),
      el("p", { text: `As version ${result.version}; other laptops get it at their next sync.` }));
    loadFiles(true).catch(() => null);
    const current = `#/file?${query({ path })}`;
    if (location.hash === current) viewFile(path);  // Undo right after a delete: already on this address
    else location.hash = current;
  } catch (error) {
    button.disabled = false;
    const where = document.getElementById("banner") || main();
    where.prepend(el("div", { class: "banner bad", role: "alert" }, el("strong", { text: "Not restored" }), el("p", { text: error.message })));
  }
}

// ---- history: a file's versions, and the files deleted now ----------------------------------------------------
const CHANGES = { write: "written", push: "edited", merge: "merged", conflict: "conflict copy", delete: "deleted",
  restore: "restored", disk: "edited on the server", "before-history": "as the history began" };
const older = (params, next) => (next ? el("p", {}, el("a", { href: `#/history?${query({ ...params, before: next })}`, text: "Older…" })) : null);

async function viewHistory(path, before) {
  show(el("p", { class: "summary", text: `Loading the history of ${path}…` }));
  try {
    const mine = navigation;
    const listed = await api(`/api/history?${query({ path, before })}`);
    if (superseded(mine)) return;
    const rows = listed.versions.map((v) => el("li", { class: "version" },
      v.hash ? el("a", { class: "mono", href: `#/file?${query({ path, v: v.version })}`, text: `version ${v.version}` })
        : el("span", { class: "mono", text: `version ${v.version}` }),
      "  ", el("span", { class: "pill", text: CHANGES[v.change] || v.change }), "  ",
      el("span", { class: "muted" }, whoWhen(v), v.hash ? ` · ${bytes(v.size)}` : "")));
    show(el("h1", { text: "History" }),
      el("p", {}, el("a", { class: "mono", href: `#/file?${query({ path })}`, text: path }),
        el("span", { class: "muted", text: " · newest first; open a version to read it or bring it back." })),
      rows.length ? el("ul", { class: "plain", "aria-label": `Versions of ${path}` }, rows) : el("p", { class: "empty", text: "No versions." }),
      older({ path }, listed.next_before));
  } catch (error) { show(failure(error)); }
}

async function viewDeleted(before) {
  show(el("p", { class: "summary", text: "Loading deleted files…" }));
  try {
    const mine = navigation;
    const listed = await api(`/api/history?${query({ before })}`);
    if (superseded(mine)) return;
    const rows = listed.versions.map((v) => el("li", { class: "version" },
      el("a", { class: "mono", href: `#/history?${query({ path: v.path })}`, text: v.path }), "  ",
      el("span", { class: "muted" }, "deleted ", whoWhen(v)), "  ",
      v.restore_version ? el("button", { class: "plain", type: "button", "data-path": v.path,
        onclick: (event) => restoreFile(v.path, v.restore_version, event.target), text: "Restore" }) : null));
    show(el("h1", { text: "Deleted files" }),
      el("p", { class: "muted", text: "Every deletion keeps the file's versions: restore brings the last one back on every laptop." }),
      rows.length ? el("ul", { class: "plain", "aria-label": "Deleted files" }, rows) : el("p", { class: "empty", text: "Nothing is deleted." }),
      older({}, listed.next_before));
  } catch (error) { show(failure(error)); }
}

function saveBanner(result) {
  if (result.status === "conflict") {
    return el("div", { class: "banner warn", role: "alert", id: "conflict" },
      el("strong", { text: "Conflict: someone changed the same lines since you opened this file" }),
      el("p", {}, "The server kept its version, shown below. Your text is saved, unchanged, as ",
        el("a", { class: "mono", href: `#/file?${query({ path: result.conflict_path })}`, text: result.conflict_path }),
        ". Compare the two and merge by hand; nothing was lost."));
  }
  const text = result.status === "merged" ? "Saved, merged with changes others made meanwhile."
    : result.status === "unchanged" ? "Nothing to save: the text is unchanged." : "Saved.";
  return el("div", { class: "banner ok", role: "status" }, el("strong", { text }),
    el("p", { text: `Revision ${result.revision}. Other laptops get it at their next sync, within seconds.` }));
}

// ---- sync and index -----------------------------------------------------------------------------------------
const card = (label, value, sub) => el("div", { class: "card" }, el("div", { class: "label", text: label }),
  el("div", { class: "value" }, value), sub ? el("div", { class: "sub" }, sub) : null);
const exchange = (part) => (part && part.at ? [stamp(part.at), ` · rev ${part.revision ?? "?"}`] : "never");

async function viewSync() {
  show(el("p", { class: "summary", text: "Loading sync state…" }));
  try {
    const mine = navigation;
    const { server, local, conflict_copies: copies } = await api("/api/status");
    if (superseded(mine)) return;
    const parts = [el("h1", { text: "Sync" }),
      el("p", { class: "muted", text: `Index ${server.index} at revision ${server.revision}; this device is ${server.caller} (${server.access === "rw" ? "read and write" : "read only"}).` })];
    parts.push(el("h2", { text: "This laptop" }));
    if (local.problem) parts.push(el("div", { class: "banner warn" }, el("p", { text: local.problem })));
    else {
      const pending = local.pending || { count: 0, changes: [] };
      parts.push(el("div", { class: "cards" },
        card("Last pull", exchange(local.last_pull)),
        card("Last push", exchange(local.last_push)),
        card("Queued changes", String(pending.count), pending.count ? "waiting to be pushed" : "all sent"),
        card("Syncing now", el("span", { class: `state ${local.syncing_now ? "ok" : "warn"}`, text: local.syncing_now ? "yes" : "no" }),
          local.syncing_now ? "memory-proxy run is syncing" : local.sync.reason)),
      el("p", { class: "muted mono", text: local.project }));
      if (pending.changes.length) parts.push(el("ul", { class: "plain" }, pending.changes.map((c) => el("li", { class: "mono", text: `${c.kind}  ${c.path}` }))));
      if (local.last_error) parts.push(el("div", { class: "banner bad" }, el("p", { text: `Last error: ${local.last_error}` })));
    }
    parts.push(el("h2", { text: `Conflict copies to resolve (${copies.length})` }));
    parts.push(copies.length ? el("ul", { class: "plain" }, copies.map((f) => el("li", {},
      el("a", { class: "mono", href: `#/file?${query({ path: f.path })}`, text: f.path }), "  ", el("span", { class: "muted" }, whoWhen(f)))))
      : el("p", { class: "muted", text: "None. Every edit merged cleanly." }));
    parts.push(el("h2", { text: "Devices on this index" }));
    parts.push(el("table", { class: "grid" }, el("thead", {}, el("tr", {}, el("th", { text: "Device" }), el("th", { text: "Last pull" }), el("th", { text: "Last push" }))),
      el("tbody", {}, server.sync.map((s) => el("tr", {}, el("td", { text: s.caller }),
        el("td", {}, exchange({ at: s.last_pull_at, revision: s.pulled_revision })),
        el("td", {}, exchange({ at: s.last_push_at, revision: s.pushed_revision })))))));
    show(...parts);
  } catch (error) { show(failure(error)); }
}

const perSource = (counts) => Object.entries(counts || {}).map(([k, v]) => `${v} ${k}`).join(" · ") || "none";
const total = (counts) => Object.values(counts || {}).reduce((a, b) => a + b, 0);
function bytes(n) { return n > 1048576 ? `${(n / 1048576).toFixed(1)} MB` : `${Math.ceil(n / 1024)} KB`; }

async function viewIndex() {
  show(el("p", { class: "summary", text: "Loading index state…" }));
  try {
    const mine = navigation;
    const { server: s } = await api("/api/status");
    if (superseded(mine)) return;
    const mode = s.search_modes.includes("hybrid") ? "hybrid" : s.search_modes[0] || "none";
    show(el("h1", { text: `Index ${s.index}` }),
      el("p", { class: "muted", text: `Server ${s.server_version}; you are ${s.caller} with ${s.access} access.` }),
      s.notice ? el("div", { class: "banner warn" }, el("p", { text: s.notice })) : null,
      el("div", { class: "cards" },
        card("Files", String(total(s.files)), perSource(s.files)),
        card("Chunks", String(total(s.chunks)), perSource(s.chunks)),
        card("Search mode", mode, `available: ${s.search_modes.join(", ") || "none"}`),
        card("Model", s.model || "none", s.dimensions ? `${s.provider} · ${s.dimensions} dimensions` : s.provider),
        card("Pending", String(s.pending_files + s.pending_vectors), `${s.pending_files} files · ${s.pending_vectors} vectors`),
        card("Database", bytes(s.database_bytes), `revision ${s.revision}`),
        card("Last change", s.last_change_at ? stamp(s.last_change_at) : "never")),
      Object.keys(s.unreadable || {}).length ? [el("h2", { text: "Unreadable on the server" }),
        el("ul", { class: "plain" }, Object.entries(s.unreadable).map(([p, why]) => el("li", { class: "mono", text: `${p}: ${why}` })))] : null);
  } catch (error) { show(failure(error)); }
}

// ---- theme, keys, start -------------------------------------------------------------------------------------
const THEMES = ["system", "light", "dark"];
function applyTheme(theme) {
  if (theme === "system") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", theme);
  const button = document.getElementById("theme");
  button.title = `Theme: ${theme}`;
  button.setAttribute("aria-label", `Theme: ${theme}`);
}

function moveFocus(step) {
  const links = [...document.querySelectorAll(".hit-link, .tree a")];
  if (!links.length) return;
  const at = links.indexOf(document.activeElement);
  links[Math.max(0, Math.min(links.length - 1, at + step))].focus();
}

function onKey(event) {
  const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName || "");
  if (state.editing && (event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "s") {
    event.preventDefault();
    document.getElementById("save")?.click();
  } else if (state.editing && event.key === "Escape") {
    stopEdit();
  } else if (typing) {
    if (event.key === "Escape") document.activeElement.blur();
    if (event.key === "ArrowDown" && document.activeElement.id === "q" && document.querySelector(".hit-link")) {
      event.preventDefault();
      document.querySelector(".hit-link").focus();
    }
  } else if (event.key === "/") {
    event.preventDefault();
    document.getElementById("q").focus();
  } else if (event.key === "e" && state.file && location.hash.startsWith("#/file")) {
    event.preventDefault();
    startEdit();
  } else if (event.key === "n" && !readOnly()) {
    event.preventDefault();
    location.hash = "#/new";
  } else if (event.key === "j" || event.key === "ArrowDown") {
    if (event.key === "j" || document.activeElement?.matches(".hit-link, .tree a")) { event.preventDefault(); moveFocus(1); }
  } else if (event.key === "k" || event.key === "ArrowUp") {
    if (event.key === "k" || document.activeElement?.matches(".hit-link, .tree a")) { event.preventDefault(); moveFocus(-1); }
  }
}

function start() {
  let theme = localStorage.getItem("memory-theme") || "system";
  applyTheme(theme);
  document.getElementById("theme").addEventListener("click", () => {
    theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
    localStorage.setItem("memory-theme", theme);
    applyTheme(theme);
  });
  document.getElementById("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = document.getElementById("q").value.trim();
    location.hash = q ? `#/search?${query({ q })}` : "#/";
  });
  for (const [id, by] of [["by-folder", "folder"], ["by-day", "day"]]) {
    document.getElementById(id).addEventListener("click", () => {
      state.by = by;
      document.getElementById("by-folder").setAttribute("aria-selected", String(by === "folder"));
      document.getElementById("by-day").setAttribute("aria-selected", String(by === "day"));
      renderTree();
    });
  }
  document.getElementById("filter").addEventListener("input", renderTree);
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", route);
  api("/api/info").then((info) => {
    state.info = info;
    document.getElementById("where").textContent = `${info.device} → ${info.server} · index ${info.index}`
      + (readOnly() ? " · read only" : "");
    document.getElementById("new-note").hidden = readOnly();
    if (readOnly() && !state.editing) route();  // a view drawn before this answer offered changes
    document.title = `Memory · ${info.index}`;
  }).catch((error) => { document.getElementById("where").textContent = error.message; });
  loadFiles().catch((error) => document.getElementById("tree").replaceChildren(el("p", { class: "muted", text: error.message })));
  route();
}

document.addEventListener("DOMContentLoaded", start);
