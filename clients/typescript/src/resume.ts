/**
 * The reconnect loop shared by the resumable server streams (StreamRun by seq,
 * WatchThread by version): reopen after a transport failure, from the cursor of
 * the last item delivered, within the retry policy.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { type PaiError, toPaiError } from "./errors.js";
import { type RetryPolicy, backoffMs, isTransient, sleep } from "./retry.js";

/** How to follow one resumable stream. */
export interface Resumable<T> {
  policy: RetryPolicy;
  signal?: AbortSignal;
  /** Opens the stream after the current cursor. */
  open: () => AsyncIterable<T>;
  /** Takes an item: advances the cursor, or answers false for one already delivered. */
  advance: (item: T) => boolean;
  /** Whether the item is the stream's last (a terminal status, a deletion). */
  isLast: (item: T) => boolean;
  /** After a clean end without the last item: whether the stream is done anyway. */
  doneAfterCleanEnd: () => Promise<boolean>;
  /** Why a clean end that is not done is a failure (the error's message). */
  endedEarly: string;
  onReconnect?: (error: PaiError, failures: number) => void;
}

/**
 * The stream's items, reopened on transient failures until its last item.
 * Only consecutive failures without an item count against `maxAttempts`; past
 * it, or on an answer from the server, the error is thrown.
 */
export async function* resuming<T>(r: Resumable<T>): AsyncGenerator<T, void, undefined> {
  let failures = 0;
  for (;;) {
    let failure: PaiError;
    try {
      for await (const item of r.open()) {
        if (!r.advance(item)) continue; // never hand out an item twice
        failures = 0;
        yield item;
        if (r.isLast(item)) return;
      }
      if (await r.doneAfterCleanEnd()) return;
      failure = toPaiError(new ConnectError(r.endedEarly, Code.Unavailable));
    } catch (e) {
      failure = toPaiError(e);
      if (r.signal?.aborted || !isTransient(failure)) throw failure;
    }
    failures++;
    if (failures >= r.policy.maxAttempts) throw failure;
    r.onReconnect?.(failure, failures);
    await sleep(backoffMs(r.policy, failures - 1, failure), r.signal);
  }
}
