/**
 * PaiClient's bearer token and TLS options, and RetryInfo, against a real
 * `pai-grpc serve` that requires mutual TLS and a token and limits Sends
 * (PAI_SECURE_ADDRESS; tests/test_typescript_client.py writes the PEM files).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import {
  PaiClient,
  type PaiClientOptions,
  ResourceExhaustedError,
  RunStatus,
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
        const run = await thread.send("over TLS");
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

    test("a rate-limited Send is not retried; it carries RetryInfo, after which a Send succeeds", async () => {
      const c = client();
      try {
        const thread = await c.createThread();
        // Take the only token of the bucket (an earlier test may have taken it: wait it out).
        await thread.send("first").catch(async (e: unknown) => {
          if (!(e instanceof ResourceExhaustedError)) throw e;
          await new Promise((r) => setTimeout(r, e.retryDelayMs ?? 2000));
          return thread.send("first");
        });
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
