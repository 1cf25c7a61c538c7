// The console: threads, a thread's transcript and runs, a run's live view,
// pending actions and timeline. Every action is the API call a client makes.
import { ApiError, call, setToken, stream, token } from "./api.js";
import { timelineEntries } from "./timeline.js";

const main = document.getElementById("main");
const notice = document.getElementById("notice");
let leaving = new AbortController(); // aborts the streams of the view being left

/** h("tag", {attr: value, onclick: fn}, ...children): a DOM node (text is never parsed as HTML). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(error) {
  if (error instanceof ApiError && error.code === "unauthenticated" && !token()) {
    notice.textContent = "Sign in with a bearer token or JWT to use the console.";
    return;
  }
  const reason = error instanceof ApiError && error.reason ? ` (${error.reason})` : "";
  const code = error instanceof ApiError ? `${error.code}: ` : "";
  notice.textContent = `${code}${error.message}${reason}`;
  setTimeout(() => {
    if (notice.textContent.startsWith(code)) notice.textContent = "";
  }, 8000);
}

const short = (s) => (s || "").replace(/^(THREAD_STATUS|RUN_STATUS|RUN_OUTCOME|MESSAGE_ROLE|PENDING_ACTION_KIND|FINISH_REASON|TOOL_STATE)_/, "").toLowerCase();
const json = (v) => (v === undefined ? "" : JSON.stringify(v));
const when = (t) => (t ? new Date(t).toLocaleString() : "");
const RETRYABLE = new Set(["unavailable", "canceled", "deadline_exceeded"]);
const TERMINAL = new Set(["RUN_STATUS_COMPLETED", "RUN_STATUS_FAILED", "RUN_STATUS_CANCELLED"]);

function usageText(u) {
  if (!u) return "";
  const parts = [];
  if (u.inputTokens !== undefined) parts.push(`in ${u.inputTokens}`);
  if (u.outputTokens !== undefined) parts.push(`out ${u.outputTokens}`);
  if (u.reasoningTokens !== undefined) parts.push(`reasoning ${u.reasoningTokens}`);
  return parts.join(", ");
}

function partText(part) {
  if (part.text) return part.text.text;
  if (part.reasoning) return `(reasoning) ${part.reasoning.text}`;
  if (part.tool) {
    const t = part.tool;
    const out = t.errorText ? `error: ${t.errorText}` : t.output !== undefined ? `→ ${json(t.output)}` : "";
    return `[tool ${t.toolName} ${short(t.state)}] ${json(t.input)} ${out}`;
  }
  if (part.data) return `[data ${part.data.name}] ${json(part.data.data)}`;
  if (part.stepStart) return null;
  return `[${Object.keys(part)[0]}]`;
}

// ---- login ------------------------------------------------------------------

function renderLogin() {
  const signedIn = Boolean(token());
  document.getElementById("sign-out").hidden = !signedIn;
  document.getElementById("who").textContent = signedIn ? "Signed in" : "Not signed in";
  document.getElementById("token").value = "";
}

document.getElementById("login").addEventListener("submit", (e) => {
  e.preventDefault();
  setToken(document.getElementById("token").value.trim());
  renderLogin();
  route();
});
document.getElementById("sign-out").addEventListener("click", () => {
  setToken("");
  renderLogin();
  route();
});

// ---- threads ----------------------------------------------------------------

async function threadsView() {
  const signal = leaving.signal;
  const metaInput = h("input", { id: "filter-metadata", placeholder: "key=value or text" });
  const statusSelect = h(
    "select",
    { id: "filter-status" },
    h("option", { value: "" }, "any"),
    ["IDLE", "RUNNING", "WAITING"].map((s) => h("option", { value: `THREAD_STATUS_${s}` }, s.toLowerCase())),
  );
  const body = h("tbody");
  const table = h(
    "table",
    { id: "threads-table" },
    h("caption", {}, "Threads"),
    h("thead", {}, h("tr", {}, ["Thread", "Agent", "Status", "Messages", "Updated", "Metadata"].map((c) => h("th", { scope: "col" }, c)))),
    body,
  );
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter threads" },
    h("label", {}, "Metadata", metaInput),
    h("label", {}, "Status", statusSelect),
    h("button", { type: "submit" }, "Search"),
    h("button", { type: "button", id: "new-thread", onclick: newThread }, "New thread"),
  );
  main.replaceChildren(h("h2", {}, "Threads"), form, table);

  let threads = [];
  try {
    let pageToken = "";
    for (let page = 0; page < 20; page++) {
      const r = await call("ThreadService", "ListThreads", { pageSize: 100, pageToken });
      threads = threads.concat(r.threads || []);
      pageToken = r.nextPageToken || "";
      if (!pageToken) break;
    }
  } catch (e) {
    show(e);
  }
  if (signal.aborted) return;
  const fill = () => {
    const wanted = metaInput.value.trim().toLowerCase();
    const status = statusSelect.value;
    const [key, value] = wanted.includes("=") ? wanted.split("=", 2) : [null, null];
    const rows = threads.filter((t) => {
      if (status && t.status !== status) return false;
      if (!wanted) return true;
      const meta = t.metadata || {};
      if (key !== null) return Object.entries(meta).some(([k, v]) => k.toLowerCase() === key && String(typeof v === "object" ? json(v) : v).toLowerCase() === value);
      return json(meta).toLowerCase().includes(wanted);
    });
    body.replaceChildren(
      ...rows.map((t) =>
        h(
          "tr",
          {},
          h("td", {}, h("a", { href: `#/threads/${t.id}`, class: "thread-link" }, t.id)),
          h("td", {}, t.agent),
          h("td", {}, short(t.status)),
          h("td", {}, t.messageCount || "0"),
          h("td", {}, when(t.updateTime)),
          h("td", {}, h("code", {}, json(t.metadata || {}))),
        ),
      ),
    );
    if (!rows.length) body.append(h("tr", {}, h("td", { colspan: 6 }, "No threads match.")));
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    fill();
  });
  fill();
}

async function newThread() {
  try {
    const r = await call("ThreadService", "CreateThread", {});
    location.hash = `#/threads/${r.thread.id}`;
  } catch (e) {
    show(e);
  }
}

// ---- one thread -------------------------------------------------------------

async function loadTranscript(threadId) {
  // Hidden messages are listed only by AdminService (an admin credential, or
  // this host in local dev mode); otherwise the visible transcript.
  try {
    const r = await call("AdminService", "ListLifecycleMessages", { threadId, view: "MESSAGE_VIEW_ALL", order: "SORT_ORDER_ASC", pageSize: 500 });
    return { all: true, messages: (r.messages || []).map((m) => ({ ...m.message, visibility: m.visibility || {} })) };
  } catch (e) {
    if (!(e instanceof ApiError) || e.code !== "permission_denied") throw e;
  }
  const r = await call("ThreadService", "ListMessages", { threadId, pageSize: 500, order: "SORT_ORDER_ASC" });
  return { all: false, messages: r.messages || [] };
}

const drafts = new Map(); // unsent message text per thread, kept across re-renders

async function threadView(threadId) {
  const signal = leaving.signal;
  if (!main.querySelector("#transcript")) main.replaceChildren(h("p", {}, "Loading…"));
  let thread;
  let transcript;
  let runs;
  try {
    [thread, transcript, runs] = await Promise.all([
      call("ThreadService", "GetThread", { threadId }).then((r) => r.thread),
      loadTranscript(threadId),
      call("RunService", "ListRuns", { threadId, pageSize: 100 }).then((r) => r.runs || []),
    ]);
  } catch (e) {
    if (signal.aborted) return;
    main.replaceChildren(h("p", {}, `Cannot open thread ${threadId}.`));
    show(e);
    return;
  }
  if (signal.aborted) return; // the user moved on while this loaded
  const messages = h(
    "ol",
    { id: "transcript", "aria-label": "Transcript" },
    transcript.messages.map((m) => {
      const hidden = transcript.all && !(m.visibility.transcript ?? false);
      const outOfContext = transcript.all && !(m.visibility.context ?? false);
      return h(
        "li",
        { class: hidden ? "message hidden-message" : "message", dataset: { hidden: String(hidden), role: short(m.role) } },
        h("strong", {}, short(m.role)),
        hidden && h("span", { class: "badge hidden" }, "hidden from transcript"),
        outOfContext && h("span", { class: "badge" }, "not in model context"),
        m.runId && h("a", { class: "badge", href: `#/runs/${m.runId}` }, "run"),
        m.role === "MESSAGE_ROLE_ASSISTANT" &&
          h("button", { type: "button", class: "badge regenerate-from", "aria-label": `Regenerate from message ${m.id}`, onclick: () => regenerateFrom(threadId, m.id, thread.etag) }, "regenerate from here"),
        (m.parts || []).map(partText).filter((t) => t !== null).map((t) => h("pre", {}, t)),
      );
    }),
  );
  const runRows = runs.map((r) =>
    h(
      "tr",
      {},
      h("td", {}, h("a", { href: `#/runs/${r.id}`, class: "run-link" }, r.id)),
      h("td", { class: "run-status" }, short(r.status)),
      h("td", {}, short(r.outcome)),
      h("td", {}, r.reason || (r.error && r.error.reason) || ""),
      h("td", {}, usageText(r.usage)),
      h("td", {}, r.attempts || 0),
      h("td", {}, r.stepCount || 0),
      h("td", {}, when(r.createTime)),
      h("td", {}, TERMINAL.has(r.status) ? "" : h("button", { type: "button", class: "cancel-run", onclick: () => cancelRun(r.id, threadId) }, "Cancel")),
    ),
  );
  const text = h("textarea", { id: "send-text", rows: 3, cols: 60, required: true });
  text.value = drafts.get(threadId) || "";
  text.addEventListener("input", () => drafts.set(threadId, text.value));
  const sendForm = h(
    "form",
    { id: "send-form", class: "stack", "aria-label": "Send a message" },
    h("label", {}, "Message", text),
    h("button", { type: "submit" }, "Send"),
  );
  sendForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const r = await call("ThreadService", "Send", { threadId, parts: [{ text: { text: text.value } }], requestId: crypto.randomUUID() });
      drafts.delete(threadId);
      location.hash = `#/runs/${r.run.runId}`;
    } catch (err) {
      show(err);
    }
  });
  // Regenerate answers again from an assistant message (it and every later
  // message are removed); "last answer" is the first one after the last user message.
  const lastUser = transcript.messages.map((m) => m.role).lastIndexOf("MESSAGE_ROLE_USER");
  const lastAnswer = transcript.messages.slice(lastUser + 1).find((m) => m.role === "MESSAGE_ROLE_ASSISTANT");
  const regenerate = h("button", { type: "button", id: "regenerate", disabled: !lastAnswer }, "Regenerate last answer");
  regenerate.addEventListener("click", () => regenerateFrom(threadId, lastAnswer.id, thread.etag));
  const focused = document.activeElement && document.activeElement.id; // kept across re-renders
  main.replaceChildren(
    h("h2", {}, `Thread ${thread.id}`),
    h(
      "dl",
      { class: "head" },
      h("dt", {}, "Agent"), h("dd", {}, thread.agent),
      h("dt", {}, "Status"), h("dd", { id: "thread-status" }, short(thread.status)),
      h("dt", {}, "Metadata"), h("dd", {}, h("code", {}, json(thread.metadata || {}))),
      h("dt", {}, "Version"), h("dd", {}, thread.version),
    ),
    h("section", { "aria-labelledby": "transcript-h" },
      h("h3", { id: "transcript-h" }, "Transcript"),
      !transcript.all && h("p", {}, "Showing the visible transcript; hidden messages need an admin credential."),
      messages, sendForm, regenerate),
    h("section", { "aria-labelledby": "runs-h" },
      h("h3", { id: "runs-h" }, "Runs"),
      h("table", { id: "runs-table" },
        h("thead", {}, h("tr", {}, ["Run", "Status", "Outcome", "Reason", "Usage", "Attempts", "Steps", "Created", ""].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, runRows))),
  );
  if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  // Follow the thread: any change (a message, a run's progress) re-renders the view.
  if (signal.aborted) return;
  try {
    await stream("ThreadService", "WatchThread", { threadId, afterVersion: String(thread.version) }, () => {
      if (signal.aborted) return;
      leaving.abort();
      leaving = new AbortController();
      threadView(threadId);
    }, signal);
  } catch (e) {
    if (!signal.aborted && !(e instanceof TypeError)) show(e);
  }
}

async function regenerateFrom(threadId, messageId, etag) {
  try {
    const r = await call("ThreadService", "Regenerate", { threadId, messageId, etag, requestId: crypto.randomUUID() });
    location.hash = `#/runs/${r.run.runId}`;
  } catch (err) {
    show(err);
  }
}

async function cancelRun(runId, threadId) {
  try {
    await call("RunService", "CancelRun", { runId, reason: "cancelled from the console" });
    if (threadId) threadView(threadId);
  } catch (e) {
    show(e);
  }
}

// ---- one run ----------------------------------------------------------------

function pendingItem(action, runId, refresh) {
  const kind = short(action.kind);
  const resolve = async (resolution) => {
    try {
      await call("RunService", "ResolvePendingAction", { runId, actionId: action.id, requestId: crypto.randomUUID(), ...resolution });
      refresh();
    } catch (e) {
      show(e);
    }
  };
  const item = h("li", { class: "pending", dataset: { actionId: action.id, kind } },
    h("strong", {}, kind.replace("_", " ")), " ", action.toolName || "",
    h("pre", {}, json(action.request !== undefined ? action.request : action.input)));
  if (kind === "approval") {
    const reason = h("input", { class: "deny-reason", id: `reason-${action.id}` });
    item.append(
      h("button", { type: "button", class: "approve", onclick: () => resolve({ approval: { approved: true } }) }, "Approve"),
      " ",
      h("label", { for: `reason-${action.id}` }, "Reason "), reason,
      h("button", { type: "button", class: "deny", onclick: () => resolve({ approval: { approved: false, reason: reason.value || undefined } }) }, "Deny"),
    );
  } else {
    const input = h("textarea", { class: "tool-result", id: `result-${action.id}`, rows: 2, cols: 50 });
    item.append(
      h("label", { for: `result-${action.id}` }, kind === "data" ? "Data (JSON)" : "Tool output (JSON)"),
      input,
      h("button", { type: "button", class: "submit-result", onclick: () => {
        let value;
        try {
          value = JSON.parse(input.value);
        } catch {
          show(new Error("the value must be JSON"));
          return;
        }
        resolve(kind === "data" ? { data: value } : { toolResult: { output: value } });
      } }, "Submit"),
      kind === "client_tool" && h("button", { type: "button", class: "submit-error", onclick: () => resolve({ toolResult: { errorText: input.value || "failed" } }) }, "Report error"),
    );
  }
  return item;
}

async function runView(runId) {
  const signal = leaving.signal;
  const head = h("dl", { class: "head", id: "run-head" });
  const pending = h("ul", { id: "pending-list" });
  const status = h("p", { id: "live-status", role: "status" }, "connecting…");
  const reasoning = h("pre", { id: "live-reasoning", "aria-label": "Reasoning" });
  const text = h("pre", { id: "live-text", "aria-live": "polite", "aria-label": "Answer" });
  const tools = h("ul", { id: "live-tools", "aria-label": "Tool calls" });
  const timeline = h("ol", { id: "timeline-list" });
  const actions = h("p", {});
  main.replaceChildren(
    h("h2", {}, `Run ${runId}`),
    head, actions,
    h("section", { "aria-labelledby": "pending-h" }, h("h3", { id: "pending-h" }, "Pending actions"), pending),
    h("section", { "aria-labelledby": "live-h" }, h("h3", { id: "live-h" }, "Live"), status, reasoning, text, tools),
    h("section", { "aria-labelledby": "timeline-h" }, h("h3", { id: "timeline-h" }, "Timeline"),
      h("p", {}, "Derived from the run's events and record: steps, model calls, tool calls, pending actions and hook failures."),
      timeline),
  );

  let run = null;
  const refresh = async () => {
    try {
      const r = await call("RunService", "GetRun", { runId });
      run = r.run;
      const row = (k, v, id) => [h("dt", {}, k), h("dd", id ? { id } : {}, v)];
      head.replaceChildren(
        ...row("Thread", h("a", { href: `#/threads/${run.threadId}` }, run.threadId)),
        ...row("Status", short(run.status), "run-status"),
        ...row("Outcome", short(run.outcome)),
        ...row("Reason", run.reason || ""),
        ...row("Error", run.error ? `${run.error.reason}: ${run.error.message}` : ""),
        ...row("Usage", usageText(run.usage)),
        ...row("Attempts", run.attempts || 0),
        ...row("Steps", run.stepCount || 0),
      );
      actions.replaceChildren(
        TERMINAL.has(run.status) ? "" : h("button", { type: "button", id: "cancel-run", onclick: async () => { await cancelRun(runId); refresh(); } }, "Cancel run"),
      );
      pending.replaceChildren(...(r.pendingActions || []).map((a) => pendingItem(a, runId, refresh)));
      if (!(r.pendingActions || []).length) pending.append(h("li", {}, "None."));
      drawTimeline();
    } catch (e) {
      show(e);
    }
  };

  const events = [];
  const drawTimeline = () => {
    timeline.replaceChildren(
      ...timelineEntries(events, run).map((e) =>
        h("li", { class: e.failed ? "failed" : "", dataset: { kind: e.kind } }, h("span", { class: "kind" }, e.kind), " ", e.text),
      ),
    );
  };

  let lastSeq = 0;
  // The live text of each step. A committed message fixes the steps so far;
  // an abort (a new execution) drops whatever was streamed after that.
  let steps = [{ text: "", reasoning: "" }];
  let committed = 0;
  const draw = () => {
    text.textContent = steps.map((s) => s.text).join("");
    reasoning.textContent = steps.map((s) => s.reasoning).join("");
  };
  const onEvent = (message) => {
    const event = message.event;
    lastSeq = Math.max(lastSeq, Number(event.seq));
    events.push(event);
    const chunk = event.chunk;
    if (chunk) {
      const current = steps[steps.length - 1];
      if (chunk.startStep) steps.push({ text: "", reasoning: "" });
      else if (chunk.textDelta) current.text += chunk.textDelta.text;
      else if (chunk.reasoningDelta) current.reasoning += chunk.reasoningDelta.text;
      else if (chunk.abort) steps = [...steps.slice(0, committed), { text: "", reasoning: "" }];
      else if (chunk.toolCall) tools.append(h("li", { dataset: { toolCallId: chunk.toolCall.toolCallId } }, `${chunk.toolCall.toolName} ${json(chunk.toolCall.input)}`));
      else if (chunk.toolResult || chunk.toolError) {
        const r = chunk.toolResult || chunk.toolError;
        const li = [...tools.children].find((n) => n.dataset.toolCallId === r.toolCallId);
        if (li) li.append(chunk.toolResult ? ` → ${json(r.output)}` : ` ✗ ${r.errorText}`);
      }
      draw();
    }
    if (event.message) committed = steps.length;
    if (event.status) {
      status.textContent = short(event.status.status);
      refresh();
    } else if (event.pendingAction) {
      refresh();
    } else {
      drawTimeline();
    }
  };

  await refresh();
  // Follow live until the run is terminal, resuming after the last seq on a drop.
  for (let attempt = 0, failures = 0; !signal.aborted; attempt++) {
    try {
      const opened = () => {
        failures = 0;
        if (attempt > 0) {
          status.dataset.reconnects = String(attempt);
          status.textContent = `resumed after seq ${lastSeq}`;
        }
      };
      await stream("RunService", "StreamRun", { runId, afterSeq: String(lastSeq) }, onEvent, signal, opened);
      await refresh();
      status.textContent = run ? short(run.status) : "ended";
      status.dataset.done = "true";
      return;
    } catch (e) {
      if (signal.aborted) return;
      // A drained or restarting server ends streams with canceled/unavailable:
      // reconnect and resume after the last seq received.
      if (e instanceof ApiError && !RETRYABLE.has(e.code)) {
        status.textContent = `stream failed: ${e.code}`;
        show(e);
        return;
      }
      status.textContent = `reconnecting after seq ${lastSeq}…`;
      failures += 1;
      await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** failures, 5000)));
    }
  }
}

// ---- routing ----------------------------------------------------------------

function route() {
  notice.textContent = "";
  leaving.abort();
  leaving = new AbortController();
  const hash = location.hash || "#/threads";
  const [, kind, id] = hash.match(/^#\/(threads|runs)(?:\/(.+))?$/) || [];
  if (kind === "runs" && id) runView(decodeURIComponent(id));
  else if (kind === "threads" && id) threadView(decodeURIComponent(id));
  else threadsView();
  main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
renderLogin();
route();
