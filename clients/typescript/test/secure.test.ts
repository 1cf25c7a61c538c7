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
        retry: { maxRetries: 1, initialDelayMs: 10 },
      });
      try {
        const err = await failure(() => c.createThread());
        assert.ok(err instanceof Error);
        assert.ok(!(err instanceof UnauthenticatedError), "no call reached the server");
      } finally {
        c.close();
      }
    });

    test("a rate-limited Send carries RetryInfo, and the client waits it out", async () => {
      const patient = client();
      const hasty = client({ retry: { maxRetries: 0 } });
      try {
        const thread = await patient.createThread();
        await thread.send("first"); // takes the only token of the bucket (retrying until it has one)
        const err = await failure(() => hasty.thread(thread.id).send("too soon"));
        assert.ok(err instanceof ResourceExhaustedError, String(err));
        assert.equal(err.reason, "SEND_RATE_EXCEEDED");
        assert.ok((err.retryDelayMs ?? 0) > 0, `RetryInfo: ${err.retryDelayMs}`);
        const later = await thread.send("in time");
        assert.equal((await later.wait()).status, RunStatus.COMPLETED);
      } finally {
        patient.close();
        hasty.close();
      }
    });
  },
);
