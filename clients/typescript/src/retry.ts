/**
 * Bounded retries with exponential back-off and jitter, for calls that are
 * safe to repeat.
 *
 * A call is safe to repeat when it reads, or when it carries a request_id (the
 * server replays the first outcome instead of doing the work twice); StreamRun
 * is reopened after the last seq delivered. Only transport-level failures are
 * retried, as in the Python client: UNAVAILABLE (server restarting, connection
 * refused, shutting down) and a stream or connection that broke without a
 * status from the server.
 */
import { Code } from "@connectrpc/connect";
import { type PaiError, toPaiError } from "./errors.js";

/** How often and how patiently a failed call is tried again. */
export interface RetryPolicy {
  /**
   * Tries in all (1 turns retries off). For a run's event stream the count
   * restarts whenever an event arrives: only consecutive failures without
   * progress count.
   */
  maxAttempts: number;
  /** Milliseconds before the first retry. */
  initialDelayMs: number;
  /** Cap on the wait between two tries, in milliseconds (RetryInfo may ask for longer). */
  maxDelayMs: number;
  /** Growth of the wait per try. */
  multiplier: number;
  /** Fraction of each wait drawn at random (0..1), so clients cut off together do not return in lockstep. */
  jitter: number;
}

/** The default for unary calls and for reconnecting streams (the Python client's). */
export const DEFAULT_RETRY: Readonly<RetryPolicy> = {
  maxAttempts: 6,
  initialDelayMs: 100,
  maxDelayMs: 3000,
  multiplier: 2,
  jitter: 0.5,
};

/** Never retry. */
export const NO_RETRY: Readonly<RetryPolicy> = { ...DEFAULT_RETRY, maxAttempts: 1 };

/**
 * Whether a failed call may succeed when simply repeated: UNAVAILABLE, or a
 * connection or stream that broke without a status from the server. Node
 * reports a reset or a killed peer as INTERNAL, UNKNOWN, ABORTED, or CANCELLED
 * (it closes the streams of a dead HTTP/2 session with RST_STREAM CANCEL), all
 * without ErrorInfo; callers check their own AbortSignal before asking. A
 * status the server chose carries ErrorInfo: it is an answer, never retried.
 */
export function isTransient(err: PaiError): boolean {
  if (err.code === Code.Unavailable) return true;
  if (err.fromServer) return false;
  return (
    err.code === Code.Internal ||
    err.code === Code.Unknown ||
    err.code === Code.Aborted ||
    err.code === Code.Canceled
  );
}

/**
 * Milliseconds to wait before retry number `retry` (0-based): exponential
 * back-off, `jitter` of it random; the server's RetryInfo delay is a floor
 * that jitter never cuts.
 */
export function backoffMs(policy: RetryPolicy, retry: number, err?: PaiError): number {
  const base = Math.min(policy.maxDelayMs, policy.initialDelayMs * policy.multiplier ** retry);
  const wait = base * (1 - policy.jitter) + Math.random() * base * policy.jitter;
  return Math.max(wait, err?.retryDelayMs ?? 0);
}

/**
 * Resolves after `ms`, or rejects when the signal aborts first, with the
 * signal's reason as a PaiError (CANCELLED for an AbortError, the default).
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(toPaiError(signal.reason));
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(toPaiError(signal?.reason));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
