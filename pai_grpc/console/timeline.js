// A run's timeline, derived from its events (StreamRun) and its record (GetRun).
//
// Every lifecycle hook call of the run is a hook_call event (phase, hook, the
// kind of decision it returned, its latency, its failure if any). The runtime
// keeps no record of model call latency: steps are timed from start_step to
// finish_step, tool calls from tool_call to their result. The run's hook
// failures (plugin, phase, reason, count) close the list.

const short = (s) => (s || "").replace(/^(RUN_STATUS|RUN_OUTCOME|PENDING_ACTION_KIND|FINISH_REASON)_/, "").toLowerCase();
const ms = (a, b) => (a && b ? `${Math.max(0, Date.parse(b) - Date.parse(a))} ms` : "");

function usage(u) {
  if (!u) return "";
  const parts = [];
  if (u.inputTokens !== undefined) parts.push(`in ${u.inputTokens}`);
  if (u.outputTokens !== undefined) parts.push(`out ${u.outputTokens}`);
  return parts.length ? `tokens ${parts.join(", ")}` : "";
}

/** One hook call: "after_step guard → complete (1.2 ms, step 1)"; failures say why. */
function hookEntry(h) {
  const outcome = h.outcome || "ok";
  const failed = outcome !== "ok";
  const what = failed ? `${outcome}${h.reason ? `: ${h.reason}` : ""}` : h.decision || "none";
  const took = `${Number(h.durationMs || 0).toFixed(1)} ms`;
  const step = h.step !== undefined ? `, step ${Number(h.step) + 1}` : "";
  return { kind: "hook", text: `${h.phase} ${h.hook} → ${what} (${took}${step})`, failed };
}

/** [{kind, text, failed}] in order of the events, then the run's hook failures. */
export function timelineEntries(events, run) {
  const out = [];
  const calls = new Map();
  let step = 0;
  let stepStart = null;
  for (const event of events) {
    const c = event.chunk;
    if (c) {
      if (c.startStep) {
        step += 1;
        stepStart = event.time;
        out.push({ kind: "step", text: `step ${step} started` });
      } else if (c.finishStep) {
        const f = c.finishStep;
        const model = f.response && f.response.modelId ? `model ${f.response.modelId}, ` : "";
        out.push({
          kind: "model call",
          text: `step ${step}: ${model}finish ${short(f.finishReason)}, ${usage(f.usage)}, ${ms(stepStart, event.time)}`,
        });
      } else if (c.toolCall) {
        calls.set(c.toolCall.toolCallId, event.time);
        const invalid = c.toolCall.invalid ? ` (invalid: ${c.toolCall.errorText || ""})` : "";
        out.push({ kind: "tool call", text: `${c.toolCall.toolName} ${JSON.stringify(c.toolCall.input ?? null)}${invalid}`, failed: Boolean(c.toolCall.invalid) });
      } else if (c.toolResult) {
        const r = c.toolResult;
        out.push({ kind: "tool result", text: `${r.toolName} → ${JSON.stringify(r.output ?? null)} (${ms(calls.get(r.toolCallId), event.time)})` });
      } else if (c.toolError) {
        const r = c.toolError;
        out.push({ kind: "tool error", text: `${r.toolName}: ${r.errorText} (${ms(calls.get(r.toolCallId), event.time)})`, failed: true });
      } else if (c.toolApprovalRequest) {
        out.push({ kind: "approval", text: `approval requested for ${c.toolApprovalRequest.toolCallId}` });
      } else if (c.toolOutputDenied) {
        out.push({ kind: "approval", text: `denied: ${c.toolOutputDenied.toolCallId}`, failed: true });
      } else if (c.error) {
        out.push({ kind: "error", text: `${c.error.reason}: ${c.error.message}`, failed: true });
      } else if (c.abort) {
        out.push({ kind: "abort", text: `new execution (${c.abort.reason || "no reason"}): output since the last committed message discarded` });
      } else if (c.data && !c.data.transient) {
        out.push({ kind: "data", text: `${c.data.name} ${JSON.stringify(c.data.data ?? null)}` });
      }
    } else if (event.status) {
      const s = event.status;
      const reason = s.reason ? ` — ${s.reason}` : "";
      const error = s.error && s.error.reason ? ` — ${s.error.reason}: ${s.error.message}` : "";
      const outcome = s.outcome && s.outcome !== "RUN_OUTCOME_UNSPECIFIED" ? ` (${short(s.outcome)})` : "";
      out.push({ kind: "status", text: `${short(s.status)}${outcome}${reason}${error}`, failed: s.status === "RUN_STATUS_FAILED" });
    } else if (event.pendingAction) {
      const a = event.pendingAction;
      out.push({ kind: "pending action", text: `${short(a.kind)} ${a.toolName || ""}`.trim() });
    } else if (event.hookCall) {
      out.push(hookEntry(event.hookCall));
    } else if (event.message) {
      out.push({ kind: "message", text: `${(event.message.role || "").replace("MESSAGE_ROLE_", "").toLowerCase()} message committed` });
    }
  }
  for (const f of (run && run.hookFailures) || []) {
    out.push({ kind: "hook failure", text: `${f.plugin} ${f.phase}: ${f.reason} ×${f.count || 1}`, failed: true });
  }
  return out;
}
