/**
 * PaiClient's bearer token and TLS options, and RetryInfo, against a real
 * `pai-grpc serve` that requires mutual TLS and a token and limits Sends
 * (PAI_SECURE_ADDRESS; tests/test_typescript_client.py writes the PEM files),
 * whose "tooling" agent asks a fake Claude that calls the client tool "lookup".
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  FailedPreconditionError,
  PaiClient,
  type PaiClientOptions,
  type PendingAction,
  PendingActionKind,
  ResourceExhaustedError,
  type RunRef,
  RunStatus,
  type ThreadRef,
  UnauthenticatedError,
} from "../src/index.js";

const env = process.env;
const secure = env.PAI_SECURE_ADDRESS;

function client(options: Partial<PaiClientOptions> = {}): PaiClient {
  return new PaiClient({
    address: secure!,
    token: env.PAI_SECURE_TOKEN,
    tls: {
      ca: readFileSync(env.PAI_SECURE_CA!),
      cert: readFileSync(env.PAI_SECURE_CERT!),
      key: readFileSync(env.PAI_SECURE_KEY!),
    },
    ...options,
  });
}

/** Sends, waiting out the Send rate limit (1 per 2 s on this server) once if it is hit. */
async function sendPatiently(thread: ThreadRef, text: string): Promise<RunRef> {
  try {
    return await thread.send(text);
  } catch (e) {
    if (!(e instanceof ResourceExhaustedError)) throw e;
    await new Promise((r) => setTimeout(r, e.retryDelayMs ?? 2000));
    return thread.send(text);
  }
}

/** The first pending action the run streams (a waiting run's stream stays open: stop there). */
async function pendingAction(run: RunRef): Promise<PendingAction> {
  for await (const event of run.stream()) {
    if (event.event.case === "pendingAction") return event.event.value;
  }
  assert.fail("the run ended without a pending action");
}

async function failure(call: () => Promise<unknown>): Promise<unknown> {
  return call().then(
    () => assert.fail("the call succeeded"),
    (e: unknown) => e,
  );
}

describe(
  "PaiClient over mutual TLS with a bearer token",
  { skip: secure ? false : "needs PAI_SECURE_ADDRESS: run through tests/test_typescript_client.py" },
  () => {
    test("a client certificate and the token reach the API; a run completes", async () => {
      const c = client();
      try {
        const thread = await c.createThread();
        const run = await sendPatiently(thread, "over TLS");
        assert.equal((await run.wait()).status, RunStatus.COMPLETED);
        // The token is sent as a function's answer too.
        const viaFn = client({ token: async () => env.PAI_SECURE_TOKEN! });
        try {
          assert.equal((await viaFn.thread(thread.id).get()).id, thread.id);
        } finally {
          viaFn.close();
        }
      } finally {
        c.close();
      }
    });

    test("without the token the server answers UNAUTHENTICATED", async () => {
      const c = client({ token: undefined });
      try {
        const err = await failure(() => c.createThread());
        assert.ok(err instanceof UnauthenticatedError, String(err));
        assert.ok(err.fromServer);
      } finally {
        c.close();
      }
    });

    test("without a client certificate the handshake is refused", async () => {
      const c = new PaiClient({
        address: secure!,
        token: env.PAI_SECURE_TOKEN,
        tls: { ca: readFileSync(env.PAI_SECURE_CA!) },
        retry: { maxAttempts: 2, initialDelayMs: 10 },
      });
      try {
        const err = await failure(() => c.createThread());
        assert.ok(err instanceof Error);
        assert.ok(!(err instanceof UnauthenticatedError), "no call reached the server");
      } finally {
        c.close();
      }
    });

    test("a client tool's call pauses the run; its submitted result lets the run finish", async () => {
      const c = client();
      try {
        const thread = await c.createThread({ agent: "tooling" });
        const run = await sendPatiently(thread, "what is the meaning?");
        const action = await pendingAction(run);
        assert.equal(action.kind, PendingActionKind.CLIENT_TOOL);
        assert.equal(action.toolName, "lookup");
        assert.deepEqual(toJson(ValueSchema, action.input!), { q: "meaning" });
        const { run: waiting, pendingActions } = await run.get();
        assert.equal(waiting.status, RunStatus.WAITING);
        assert.deepEqual(
          pendingActions.map((a) => a.id),
          [action.id],
        );

        const requestId = `lookup-${action.id}`;
        await run.submitToolResult(action.id, { answer: 42 }, { requestId });
        // The same request id again is the same resolution, not a second one.
        await run.submitToolResult(action.id, { answer: 42 }, { requestId });
        const other = await failure(() => run.submitToolResult(action.id, { answer: 7 }));
        assert.ok(other instanceof FailedPreconditionError, String(other));
        assert.equal(other.reason, "PENDING_ACTION_NOT_OPEN");

        assert.equal(await run.text(), 'Result: {"answer": 42}');
        assert.equal((await run.wait()).status, RunStatus.COMPLETED);
      } finally {
        c.close();
      }
    });

    for (const approved of [true, false]) {
      test(`an approval-gated tool runs only when ${approved ? "approved" : "denied: it does not"}`, async () => {
        const c = client();
        try {
          const thread = await c.createThread({ agent: "tooling" });
          const run = await sendPatiently(thread, "transfer please");
          const action = await pendingAction(run);
          assert.equal(action.kind, PendingActionKind.APPROVAL);
          assert.equal(action.toolName, "transfer");
          assert.deepEqual(toJson(ValueSchema, action.input!), { amount: 5 });
          if (approved) await run.approve(action.id, { reason: "fine" });
          else await run.deny(action.id, { reason: "not today" });
          assert.equal((await run.wait()).status, RunStatus.COMPLETED);
          const text = await run.text();
          if (approved) assert.equal(text, 'Result: {"moved": 5}');
          else assert.ok(text.startsWith("Result: ") && !text.includes("moved"), text);
        } finally {
          c.close();
        }
      });
    }

    test("a rate-limited Send is not retried; it carries RetryInfo, after which a Send succeeds", async () => {
      const c = client();
      try {
        const thread = await c.createThread();
        await sendPatiently(thread, "first"); // takes the only token of the bucket
        const err = await failure(() => thread.send("too soon"));
        assert.ok(err instanceof ResourceExhaustedError, String(err));
        assert.equal(err.reason, "SEND_RATE_EXCEEDED");
        assert.ok(err.fromServer);
        const delay = err.retryDelayMs ?? 0;
        assert.ok(delay > 0 && delay <= 2000, `RetryInfo: ${err.retryDelayMs}`);
        await new Promise((r) => setTimeout(r, delay));
        const later = await thread.send("in time");
        assert.equal((await later.wait()).status, RunStatus.COMPLETED);
      } finally {
        c.close();
      }
    });
  },
);
