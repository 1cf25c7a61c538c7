/** PaiClient against a real `pai-grpc serve` (PAI_ADDRESS): the calls, streams and errors. */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { isMessage } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import {
  CancelledError,
  InvalidArgumentError,
  NotFoundError,
  PaiClient,
  PaiError,
  RunStatus,
  SendRequestSchema,
  ThreadChange,
  UnavailableError,
  isTerminal,
} from "../src/index.js";
import { address, collect, connect, longText, sameEvent } from "./support.js";

const ECHO = "[offline stand-in model (set ANTHROPIC_API_KEY to answer with Claude)] You said: ";
const NO_RUN = "run_01JZZZZZZZZZZZZZZZZZZZZZZZ";
const NO_ACTION = "act_01JZZZZZZZZZZZZZZZZZZZZZZZ";

describe("PaiClient", () => {
  let client: PaiClient;
  before(() => {
    client = connect();
  });
  after(() => client.close());

  test("send, then the run's text, its final record and the transcript", async () => {
    const thread = await client.createThread();
    const run = await thread.send("hello from typescript");
    assert.match(run.id, /^run_/);
    assert.equal(run.handle?.threadId, thread.id);
    assert.match(run.handle?.messageId ?? "", /^msg_/, "an idle thread commits the message at once");
    assert.equal(await run.text(), `${ECHO}hello from typescript`);
    const done = await run.wait();
    assert.equal(done.status, RunStatus.COMPLETED);
    assert.equal(done.threadId, thread.id);
    const messages = await thread.messages();
    const texts = messages.map((m) =>
      m.parts.map((p) => (p.part.case === "text" ? p.part.value.text : "")).join(""),
    );
    assert.deepEqual(texts, ["hello from typescript", `${ECHO}hello from typescript`]);
  });

  test("the stream delivers every event of the log once, in order, ending with the terminal status", async () => {
    const thread = await client.createThread();
    const run = await thread.send(longText(30));
    const live = await collect(run.stream());
    const seqs = live.map((e) => e.seq);
    assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => (a < b ? -1 : 1)));
    const last = live.at(-1)?.event;
    assert.ok(last?.case === "status" && isTerminal(last.value.status), "ends with a terminal status");
    const log = await collect(run.stream({ afterSeq: 0 }));
    assert.equal(live.length, log.length);
    live.forEach((e, i) => assert.ok(sameEvent(e, log[i]!), `event ${e.seq} differs from the log`));
    // Resuming after any delivered seq yields exactly the rest of the log.
    const cursor = log[Math.floor(log.length / 2)]!.seq;
    const rest = await collect(run.stream({ afterSeq: cursor }));
    assert.deepEqual(
      rest.map((e) => e.seq),
      log.filter((e) => e.seq > cursor).map((e) => e.seq),
    );
  });

  test("sendAndStream: the run first, then its events on the same call, equal to the log", async () => {
    const thread = await client.createThread();
    const stream = await thread.sendAndStream("one call");
    assert.match(stream.run.id, /^run_/);
    assert.equal(stream.run.handle?.threadId, thread.id);
    assert.match(stream.run.handle?.messageId ?? "", /^msg_/);
    const live = await collect(stream);
    const last = live.at(-1)?.event;
    assert.ok(last?.case === "status" && last.value.status === RunStatus.COMPLETED, "ends completed");
    const log = await collect(stream.run.stream());
    assert.equal(live.length, log.length);
    live.forEach((e, i) => assert.ok(sameEvent(e, log[i]!), `event ${e.seq} differs from the log`));
    assert.equal(await stream.run.text(), `${ECHO}one call`);
  });

  test("sendAndStream whose run is lost on the way is retried with the same request id: one run", async () => {
    // The server takes the first call and answers; the answer "goes missing".
    let calls = 0;
    const loseFirstCall: Interceptor = (next) => async (req) => {
      const res = await next(req); // the server has taken the message by now
      if (req.method.name === "SendAndStream" && ++calls === 1) {
        throw new ConnectError("answer lost", Code.Unavailable);
      }
      return res;
    };
    const flaky = connect({ interceptors: [loseFirstCall], retry: { initialDelayMs: 1 } });
    try {
      const thread = await flaky.createThread();
      const stream = await thread.sendAndStream("exactly once");
      assert.equal(calls, 2, "the lost call was retried");
      const events = await collect(stream);
      assert.equal(events[0]?.seq, 1n, "the retry streams the run from its first event");
      const { runs } = await flaky.runs.listRuns({ threadId: thread.id });
      assert.deepEqual(
        runs.map((r) => r.id),
        [stream.run.id],
      );
      assert.equal((await thread.messages()).length, 2, "one user message, one answer");
    } finally {
      flaky.close();
    }
  });

  test("sendAndStream: bad input is a typed error naming the field under send; close() stops early", async () => {
    const thread = await client.createThread();
    const bad = await thread.sendAndStream("", { parts: [{ part: { case: "text", value: { text: "" } } }] }).then(
      () => assert.fail("an empty message was accepted"),
      (e: unknown) => e,
    );
    assert.ok(bad instanceof InvalidArgumentError, String(bad));
    assert.ok(
      bad.violations.every((v) => v.field.startsWith("send.parts")),
      JSON.stringify(bad.violations),
    );
    const stream = await thread.sendAndStream(longText(2000));
    const events = stream[Symbol.asyncIterator]();
    assert.ok(!(await events.next()).done);
    stream.close();
    const { run } = await stream.run.get();
    assert.ok(!isTerminal(run.status) || run.status === RunStatus.COMPLETED, "the run goes on");
    await stream.run.cancel("test over").catch(() => undefined);
  });

  test("watch yields the head first, then the changes a run makes", async () => {
    const thread = await client.createThread();
    const changes = thread.watch()[Symbol.asyncIterator]();
    const first = await changes.next();
    assert.ok(!first.done);
    assert.equal(first.value.change, ThreadChange.SNAPSHOT);
    assert.equal(first.value.thread?.id, thread.id);
    const run = await thread.send("watched");
    await run.wait();
    const committed: string[] = [];
    let version = first.value.thread?.version ?? 0n;
    while (committed.length < 2) {
      const next = await changes.next();
      assert.ok(!next.done, "the watch ended early");
      assert.ok((next.value.thread?.version ?? 0n) >= version, "versions never go back");
      version = next.value.thread?.version ?? version;
      if (next.value.change === ThreadChange.MESSAGES_COMMITTED) committed.push(...next.value.messageIds);
    }
    await changes.return?.(undefined);
    assert.deepEqual(
      committed,
      (await thread.messages()).map((m) => m.id),
    );
  });

  test("a repeated request id returns the original run instead of a second one", async () => {
    const thread = await client.createThread({ requestId: `thread-${process.pid}-${Date.now()}` });
    const requestId = `send-${process.pid}-${Date.now()}`;
    const first = await thread.send("once", { requestId });
    const again = await thread.send("once", { requestId });
    assert.equal(again.id, first.id);
    await first.wait();
    const { run } = await first.get();
    assert.equal(run.status, RunStatus.COMPLETED);
    assert.equal((await thread.messages()).length, 2, "one user message, one answer");
  });

  test("a Send whose answer is lost is retried with the same request id: one message, one run", async () => {
    // The server commits the first Send, then its answer "goes missing".
    const seen: string[] = [];
    const loseFirstAnswer: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (!req.stream && isMessage(req.message, SendRequestSchema)) {
        seen.push(req.message.requestId);
        if (seen.length === 1) throw new ConnectError("answer lost", Code.Unavailable);
      }
      return res;
    };
    const flaky = connect({ interceptors: [loseFirstAnswer], retry: { initialDelayMs: 1 } });
    try {
      const thread = await flaky.createThread();
      const run = await thread.send("exactly once");
      assert.equal(seen.length, 2, "the lost answer was retried");
      assert.ok(seen[0], "a request id was generated");
      assert.equal(seen[1], seen[0], "the retry reused the request id");
      await run.wait();
      const { runs } = await flaky.runs.listRuns({ threadId: thread.id });
      assert.deepEqual(
        runs.map((r) => r.id),
        [run.id],
      );
      assert.equal((await thread.messages()).length, 2, "one user message, one answer");
    } finally {
      flaky.close();
    }
  });

  test("cancel stops a streaming run, and the stream ends with the cancellation", async () => {
    const thread = await client.createThread();
    const run = await thread.send(longText(2000));
    const events = run.stream()[Symbol.asyncIterator]();
    await events.next(); // the run is under way
    const cancelled = await run.cancel("user stop");
    assert.ok([RunStatus.CANCELLED, RunStatus.RUNNING].includes(cancelled.status));
    let last;
    for (let r = await events.next(); !r.done; r = await events.next()) last = r.value;
    assert.ok(last?.event.case === "status");
    assert.equal(last.event.value.status, RunStatus.CANCELLED);
    assert.equal((await run.wait()).status, RunStatus.CANCELLED);
  });

  test("close() ends a running stream at once, without reconnecting", async () => {
    const own = connect();
    const thread = await own.createThread();
    const run = await thread.send(longText(2000));
    const reconnects: number[] = [];
    const events = run.stream({ onReconnect: (_e, n) => reconnects.push(n) })[Symbol.asyncIterator]();
    assert.ok(!(await events.next()).done);
    own.close();
    const err = await (async () => {
      for (let r = await events.next(); !r.done; r = await events.next()) {
        // Events already received may still arrive.
      }
    })().then(
      () => assert.fail("the stream ended normally after close()"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CancelledError, String(err));
    assert.deepEqual(reconnects, []);
    const stopped = await client.run(run.id).cancel("test over");
    assert.ok([RunStatus.CANCELLED, RunStatus.RUNNING].includes(stopped.status));
  });

  test("a caller's AbortSignal stops a stream as CANCELLED", async () => {
    const thread = await client.createThread();
    const run = await thread.send(longText(2000));
    const stop = new AbortController();
    const err = await (async () => {
      for await (const _ of run.stream({ signal: stop.signal })) stop.abort();
    })().then(
      () => assert.fail("the stream ended normally after abort()"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CancelledError, String(err));
    await run.cancel("test over");
  });

  test("errors are typed and carry the ErrorInfo reason", async () => {
    const missing = await client
      .run(NO_RUN)
      .get()
      .then(
        () => assert.fail("GetRun of an unknown run succeeded"),
        (e: unknown) => e,
      );
    assert.ok(missing instanceof NotFoundError, String(missing));
    assert.equal(missing.code, Code.NotFound);
    assert.equal(missing.reason, "RUN_NOT_FOUND");
    assert.equal(missing.domain, "pai.v1");
    assert.ok(missing.fromServer);
    assert.match(missing.message, /^NOT_FOUND RUN_NOT_FOUND: /);

    const bad = await client
      .run("not-a-run-id")
      .get()
      .then(
        () => assert.fail("GetRun of a malformed id succeeded"),
        (e: unknown) => e,
      );
    assert.ok(bad instanceof InvalidArgumentError, String(bad));
    assert.deepEqual(
      bad.violations.map((v) => v.field),
      ["run_id"],
    );

    // A stream of an unknown run fails at once: a server answer is never retried.
    const reconnects: number[] = [];
    const streamed = await collect(
      client.run(NO_RUN).stream({ onReconnect: (_e, n) => reconnects.push(n) }),
    ).then(
      () => assert.fail("StreamRun of an unknown run succeeded"),
      (e: unknown) => e,
    );
    assert.ok(streamed instanceof NotFoundError, String(streamed));
    assert.deepEqual(reconnects, []);
  });

  test("approve, deny and tool results reach ResolvePendingAction with typed answers", async () => {
    const thread = await client.createThread();
    const run = await thread.send("no tools here");
    await run.wait();
    for (const call of [
      () => run.approve(NO_ACTION, { reason: "ok" }),
      () => run.deny(NO_ACTION),
      () => run.submitToolResult(NO_ACTION, { answer: 42 }),
      () => run.submitToolError(NO_ACTION, "tool broke"),
      () => run.submitData(NO_ACTION, [1, "two"]),
    ]) {
      const err = await call().then(
        () => assert.fail("resolving an unknown action succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NotFoundError, String(err));
      assert.equal(err.reason, "PENDING_ACTION_NOT_FOUND");
    }
  });

  test("an unreachable server fails with UNAVAILABLE after the bounded retries", async () => {
    const [host] = address().split(":");
    // Port 1 on loopback: nothing listens there, connections are refused at once.
    const dead = new PaiClient({
      address: `${host}:1`,
      retry: { maxAttempts: 4, initialDelayMs: 10, maxDelayMs: 20 },
    });
    try {
      const reconnects: number[] = [];
      const err = await collect(
        dead.run(NO_RUN).stream({ onReconnect: (_e, n) => reconnects.push(n) }),
      ).then(
        () => assert.fail("a stream from a dead address succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof UnavailableError, String(err));
      assert.ok(err instanceof PaiError);
      assert.equal(err.codeName, "UNAVAILABLE");
      assert.equal(err.reason, "UNAVAILABLE", "no ErrorInfo: the code stands in");
      assert.ok(!err.fromServer);
      assert.deepEqual(reconnects, [1, 2, 3]);
    } finally {
      dead.close();
    }
  });
});
