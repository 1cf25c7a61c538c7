/**
 * The run event stream across kill -9 and a restart of the server.
 *
 * tests/test_typescript_client.py watches PAI_CONTROL_DIR: when a test writes
 * `kill` there (mid-stream) it kills the server with SIGKILL, for `term` it
 * sends SIGTERM (a drain: the run is handed back, the stream cut) and waits for
 * the exit; then it starts a new server on the same address. The stream must
 * reconnect by itself and deliver exactly the durable log: every logged event
 * once, in order, equal to the log; events the dead server streamed beyond the
 * log only before the recovery abort that discards them.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { type Run, type RunEvent, RunStatus, type WatchThreadResponse } from "../src/index.js";
import { collect, connect, isRecoveryAbort, longText, sameEvent } from "./support.js";

const control = process.env.PAI_CONTROL_DIR;
const ECHO = "[offline stand-in model (set ANTHROPIC_API_KEY to answer with Claude)] You said: ";
const skip = control ? false : "needs PAI_CONTROL_DIR: run through tests/test_typescript_client.py";

/** Streams a run while the harness restarts the server (`how`); checks it against the log. */
async function streamAcrossRestart(how: "kill" | "term"): Promise<{ record: Run; log: RunEvent[] }> {
  // A budget that outlasts a server start on a loaded machine.
  const client = connect({ retry: { maxAttempts: 60, initialDelayMs: 50, maxDelayMs: 1000 } });
  const stopWatching = new AbortController();
  try {
    const thread = await client.createThread();
    const words = longText(200);
    // A watcher of the thread head rides through the same restart.
    const watched: WatchThreadResponse[] = [];
    const watchReconnects: number[] = [];
    const watching = (async () => {
      const changes = thread.watch({
        signal: stopWatching.signal,
        onReconnect: (_err, n) => watchReconnects.push(n),
      });
      try {
        for await (const change of changes) watched.push(change);
      } catch (e) {
        if (!stopWatching.signal.aborted) throw e;
      }
    })();
    const run = await thread.send(words);
    const live: RunEvent[] = [];
    const reconnects: string[] = [];
    let deltas = 0;
    let asked = false;
    const stream = run.stream({
      onReconnect: (err, attempt, after) => reconnects.push(`${attempt}:${err.codeName}@${after}`),
    });
    for await (const event of stream) {
      live.push(event);
      if (event.event.case === "chunk" && event.event.value.chunk.case === "textDelta") deltas++;
      if (!asked && deltas >= 20) {
        asked = true;
        writeFileSync(join(control!, how), run.id);
      }
    }
    assert.ok(asked, "the run ended before the server could be stopped");
    assert.ok(reconnects.length >= 1, "the stream never broke: the restart came too late");

    const record = (await run.get()).run;
    assert.equal(record.status, RunStatus.COMPLETED);

    const log = await collect(client.run(run.id).stream({ afterSeq: 0 }));
    const seqs = live.map((e) => e.seq);
    for (let i = 1; i < seqs.length; i++) {
      assert.ok(seqs[i]! > seqs[i - 1]!, `seq ${seqs[i]} after ${seqs[i - 1]}: duplicate or disorder`);
    }
    const logged = new Map(log.map((e) => [e.seq, e]));
    // Complete: the live events that the log has are the whole log, in order, unchanged.
    const kept = live.filter((e) => logged.has(e.seq));
    assert.deepEqual(
      kept.map((e) => e.seq),
      log.map((e) => e.seq),
      "the stream skipped durable events",
    );
    kept.forEach((e) => assert.ok(sameEvent(e, logged.get(e.seq)!), `seq ${e.seq} differs from the log`));
    // Anything streamed beyond the log was the stopped server's partial step: a
    // recovery abort must follow it.
    const lastExtra = live.findLastIndex((e) => !logged.has(e.seq));
    if (lastExtra >= 0) {
      const abort = live.findIndex((e, i) => i > lastExtra && isRecoveryAbort(e));
      assert.ok(abort > lastExtra, "events beyond the log were not followed by a recovery abort");
    }
    assert.equal(await run.text(), `${ECHO}${words}`);

    // The watcher reconnected and reached the thread's final version.
    const head = await thread.get();
    for (let i = 0; i < 600 && !watched.some((c) => (c.thread?.version ?? 0n) >= head.version); i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    stopWatching.abort();
    await watching;
    assert.ok(watchReconnects.length >= 1, "the watch never broke");
    const versions = watched.map((c) => c.thread?.version ?? 0n);
    versions.slice(1).forEach((v, i) => assert.ok(v >= versions[i]!, "a version went back"));
    assert.ok(versions.at(-1)! >= head.version, `the watch stopped at ${versions.at(-1)} < ${head.version}`);
    return { record, log };
  } finally {
    stopWatching.abort();
    client.close();
  }
}

test("the stream resumes across kill -9 and a restart, equal to the durable log", { skip }, async () => {
  const { record, log } = await streamAcrossRestart("kill");
  assert.ok(record.attempts >= 2, `attempts ${record.attempts}: the kill did not hit the execution`);
  assert.ok(log.some(isRecoveryAbort), "the recovered attempt starts with a recovery abort");
});

test("the stream resumes across a drain (SIGTERM) and a restart, equal to the durable log", { skip }, async () => {
  await streamAcrossRestart("term");
});
