/**
 * When and how long the client waits before retrying a call.
 *
 * Every mutating call carries a request_id, so repeating it after a lost
 * answer returns the original outcome instead of doing the work twice; reads
 * and StreamRun (resumed from the last seq) are safe to repeat as they are.
 */
import { Code } from "@connectrpc/connect";
import type { PaiError } from "./errors.js";

/** Bounds of the client's retries; each outage gets the full budget again. */
export interface RetryPolicy {
  /** Retries after the first try (per outage for streams); 0 disables retrying. */
  maxRetries: number;
  /** The first back-off, in milliseconds. */
  initialDelayMs: number;
  /** The longest back-off, in milliseconds (RetryInfo may ask for longer). */
  maxDelayMs: number;
  /** Growth of the back-off per retry. */
  multiplier: number;
}

/** Enough to ride out a server restart (about 20 s of back-off in total). */
export const DEFAULT_RETRY: RetryPolicy = {
  maxRetries: 10,
  initialDelayMs: 100,
  maxDelayMs: 5000,
  multiplier: 2,
};

/**
 * Whether a failure is transient: UNAVAILABLE, or a connection or stream that
 * broke without a status from the server (a reset or a killed peer surfaces as
 * INTERNAL, UNKNOWN, ABORTED, or CANCELLED when Node closes the streams of a
 * dead HTTP/2 session, all with no ErrorInfo; callers check their own
 * AbortSignal before asking). A status the server chose
 * (it carries ErrorInfo) is an answer, never retried, except
 * RESOURCE_EXHAUSTED with RetryInfo (a rate limit asking to come back later).
 */
export function isTransient(err: PaiError): boolean {
  if (err.code === Code.Unavailable) return true;
  if (err.code === Code.ResourceExhausted) return err.fromServer && err.retryDelayMs !== undefined;
  if (err.fromServer) return false;
  return (
    err.code === Code.Internal ||
    err.code === Code.Unknown ||
    err.code === Code.Aborted ||
    err.code === Code.Canceled
  );
}

/**
 * The wait before retry number `attempt` (0-based): exponential back-off with
 * "equal jitter" (half fixed, half random) so clients that lost the same
 * server do not reconnect in lockstep; never shorter than the server's RetryInfo.
 */
export function backoffMs(policy: RetryPolicy, attempt: number, err?: PaiError): number {
  const base = Math.min(policy.maxDelayMs, policy.initialDelayMs * policy.multiplier ** attempt);
  const jittered = base / 2 + Math.random() * (base / 2);
  return Math.max(jittered, err?.retryDelayMs ?? 0);
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
