/**
 * `PaiClient`: threads, runs and resumable run event streams over gRPC.
 *
 * A thin layer over the generated service clients (still reachable as
 * `client.threads` and `client.runs` for everything it does not wrap) that adds
 * what every application needs: bearer token and TLS, request ids on every
 * mutating call, bounded retries with jittered back-off, typed errors, and a
 * run event stream that survives a lost connection or a restarted server by
 * resuming from the last sequence number it delivered.
 */
import { randomUUID } from "node:crypto";
import { type JsonObject, type JsonValue, type MessageInitShape, fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  type CallOptions,
  type Client,
  Code,
  ConnectError,
  type Interceptor,
  createClient,
} from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import {
  type PendingAction,
  type Run,
  type RunEvent,
  type RunHandle,
  RunStatus,
} from "./gen/pai/v1/runs_pb.js";
import { RunService } from "./gen/pai/v1/run_service_pb.js";
import type { Message, Thread } from "./gen/pai/v1/threads_pb.js";
import {
  Delivery,
  type SendAndStreamResponse,
  ThreadChange,
  ThreadService,
  type WatchThreadResponse,
} from "./gen/pai/v1/thread_service_pb.js";
import type { MessagePartSchema } from "./gen/pai/v1/parts_pb.js";
import { type PaiError, toPaiError } from "./errors.js";
import { resuming } from "./resume.js";
import { DEFAULT_RETRY, type RetryPolicy, backoffMs, isTransient, sleep } from "./retry.js";

/** Certificates for a TLS (or, with cert and key, mutual TLS) channel, PEM encoded. */
export interface TlsOptions {
  /** Trusted CA certificates; the system roots when omitted. */
  ca?: string | Buffer;
  /** Client certificate chain, for mTLS. */
  cert?: string | Buffer;
  /** Client private key, for mTLS. */
  key?: string | Buffer;
  /** Name to verify the server certificate against, when it differs from the address host. */
  serverName?: string;
}

/** How to reach and authenticate to a pai-grpc server. */
export interface PaiClientOptions {
  /** `host:port`, or a URL (`http://` plaintext h2c, `https://` TLS). */
  address: string;
  /** Bearer token sent as `authorization` on every call (a function is asked each call). */
  token?: string | (() => string | Promise<string>);
  /** TLS certificates; `true` for TLS with the system roots. Plaintext when omitted. */
  tls?: TlsOptions | boolean;
  /** Deadline of each unary call attempt, in milliseconds (default 30 s). */
  timeoutMs?: number;
  /** Retry bounds; see {@link DEFAULT_RETRY}. */
  retry?: Partial<RetryPolicy>;
  /** Extra interceptors, after the one that adds the token. */
  interceptors?: Interceptor[];
}

/** Per-call options of the wrapper's methods. */
export interface CallControl {
  /** Aborts the call (and its retries) when signalled. */
  signal?: AbortSignal;
}

/** Options of a call that changes state: its idempotency key. */
export interface MutationOptions extends CallControl {
  /** Idempotency key; generated when omitted. Reuse it to retry the same operation yourself. */
  requestId?: string;
}

/** Options of {@link ThreadRef.send}. */
export interface SendOptions extends MutationOptions {
  /** How a message sent to a busy thread is delivered (queue by default, or steer). */
  delivery?: Delivery;
  /** Message metadata. */
  metadata?: JsonObject;
  /** Initial run metadata (client-readable). */
  runMetadata?: JsonObject;
  /** Further parts after the text part (files, data). */
  parts?: MessageInitShape<typeof MessagePartSchema>[];
}

/** Options of {@link RunRef.stream}. */
export interface StreamOptions extends CallControl {
  /** Start after this sequence number (0: from the first event). */
  afterSeq?: number | bigint;
  /** Called before each reconnect: the error, the consecutive failures so far, the cursor. */
  onReconnect?: (error: PaiError, failures: number, afterSeq: bigint) => void;
}

/** Options of {@link ThreadRef.sendAndStream}: the message's, and the stream's reconnects. */
export interface SendAndStreamOptions extends SendOptions {
  /** Called before each reconnect of the stream: the error, the consecutive failures, the cursor. */
  onReconnect?: (error: PaiError, failures: number, afterSeq: bigint) => void;
}

/**
 * What {@link ThreadRef.sendAndStream} resolves to: the run that answers the
 * message, and (iterating it) that run's events until it is terminal.
 */
export interface RunStream extends AsyncIterable<RunEvent> {
  /** The run, known before its first event. */
  readonly run: RunRef;
  /** Stops streaming (the run goes on). */
  close(): void;
}

/** Options of {@link ThreadRef.watch}. */
export interface WatchOptions extends CallControl {
  /** Only changes after this thread version (0: the current head first). */
  afterVersion?: number | bigint;
  /** Called before each reconnect: the error, the consecutive failures so far, the version. */
  onReconnect?: (error: PaiError, failures: number, afterVersion: bigint) => void;
}

const TERMINAL = new Set([RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]);

/** Whether a run status is terminal (completed, failed or cancelled). */
export function isTerminal(status: RunStatus): boolean {
  return TERMINAL.has(status);
}

/** The gRPC base URL of an address: `host:port` becomes `http(s)://host:port`. */
function baseUrl(address: string, tls: boolean): string {
  if (/^https?:\/\//.test(address)) return address;
  return `${tls ? "https" : "http"}://${address}`;
}

/** A client of one pai-grpc server. Call {@link close} when done. */
export class PaiClient {
  /** The generated ThreadService client (no retries, raw ConnectErrors). */
  readonly threads: Client<typeof ThreadService>;
  /** The generated RunService client (no retries, raw ConnectErrors). */
  readonly runs: Client<typeof RunService>;
  /** The retry bounds in force. */
  readonly retry: RetryPolicy;
  /** Deadline of each unary call (and of the wait for a SendAndStream run), per attempt. @internal */
  readonly timeoutMs: number;
  private readonly sessions: Http2SessionManager;
  /** Aborted by {@link close}: ends every call, stream and back-off still running. */
  private readonly lifetime = new AbortController();

  constructor(options: PaiClientOptions) {
    const tls = options.tls === true ? {} : options.tls || undefined;
    const url = baseUrl(options.address, tls !== undefined);
    const nodeOptions = tls
      ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.serverName }
      : {};
    this.sessions = new Http2SessionManager(url, {}, nodeOptions);
    const interceptors: Interceptor[] = [];
    const token = options.token;
    if (token !== undefined) {
      interceptors.push((next) => async (req) => {
        const value = typeof token === "function" ? await token() : token;
        req.header.set("authorization", `Bearer ${value}`);
        return next(req);
      });
    }
    interceptors.push(...(options.interceptors ?? []));
    const transport = createGrpcTransport({
      baseUrl: url,
      sessionManager: this.sessions,
      interceptors,
    });
    this.threads = createClient(ThreadService, transport);
    this.runs = createClient(RunService, transport);
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** Creates a thread (with the default agent unless `agent` is given). */
  async createThread(
    options: MutationOptions & { agent?: string; metadata?: JsonObject } = {},
  ): Promise<ThreadRef> {
    const requestId = options.requestId ?? randomUUID();
    const response = await this.call(
      (opts) =>
        this.threads.createThread(
          { agent: options.agent ?? "", metadata: options.metadata, requestId },
          opts,
        ),
      options,
    );
    if (!response.thread) throw new Error("CreateThread answered without a thread");
    return new ThreadRef(this, response.thread.id, response.thread);
  }

  /** A handle on an existing thread (no call is made). */
  thread(id: string): ThreadRef {
    return new ThreadRef(this, id);
  }

  /** A handle on an existing run (no call is made). */
  run(id: string): RunRef {
    return new RunRef(this, id);
  }

  /** Closes the HTTP/2 connection; calls and streams still running fail with CANCELLED. */
  close(): void {
    this.lifetime.abort(new DOMException("the client is closed", "AbortError"));
    this.sessions.abort();
  }

  /**
   * The signal a call runs under: the caller's, and the client's lifetime.
   * @internal
   */
  signal(caller?: AbortSignal): AbortSignal {
    return caller ? AbortSignal.any([caller, this.lifetime.signal]) : this.lifetime.signal;
  }

  /**
   * Runs a unary call, retrying transient failures within the retry bounds.
   * Safe for every RPC the wrapper makes: reads repeat freely and mutations
   * carry a request_id the server deduplicates on.
   * @internal
   */
  async call<T>(fn: (opts: CallOptions) => Promise<T>, control: CallControl = {}): Promise<T> {
    const signal = this.signal(control.signal);
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn({ signal, timeoutMs: this.timeoutMs });
      } catch (e) {
        const err = toPaiError(e);
        if (signal.aborted || !isTransient(err) || attempt >= this.retry.maxAttempts) throw err;
        await sleep(backoffMs(this.retry, attempt - 1, err), signal);
      }
    }
  }
}

/** A thread: send messages, trigger runs, read its transcript. */
export class ThreadRef {
  constructor(
    private readonly client: PaiClient,
    /** The thread id (`thr_...`). */
    readonly id: string,
    /** The thread head, when this handle came from {@link PaiClient.createThread}. */
    readonly head?: Thread,
  ) {}

  /** Reads the thread head. */
  async get(control: CallControl = {}): Promise<Thread> {
    const r = await this.client.call((o) => this.client.threads.getThread({ threadId: this.id }, o), control);
    if (!r.thread) throw new Error("GetThread answered without a thread");
    return r.thread;
  }

  /** Sends a user message; resolves once it is committed or queued, with its run. */
  async send(text: string, options: SendOptions = {}): Promise<RunRef> {
    const request = sendRequest(this.id, text, options);
    const r = await this.client.call((o) => this.client.threads.send(request, o), options);
    if (!r.run) throw new Error("Send answered without a run");
    return new RunRef(this.client, r.run.runId, r.run);
  }

  /**
   * Sends a user message and streams the run that answers it, on one call:
   * {@link send} and then {@link RunRef.stream} without the round trip
   * between them (the first event comes sooner). Resolves once the run is
   * known; iterate the result for its events.
   *
   * The same guarantees as the two calls: the request id makes a retry safe
   * (a retry before the run arrived streams the same run), and a call that
   * breaks afterwards resumes with StreamRun after the last seq delivered.
   * The wait for the run is bounded by the client's `timeoutMs` per attempt.
   */
  async sendAndStream(text: string, options: SendAndStreamOptions = {}): Promise<RunStream> {
    const request = { send: sendRequest(this.id, text, options) };
    const signal = this.client.signal(options.signal);
    for (let attempt = 1; ; attempt++) {
      // Its own controller: a timed-out or abandoned attempt's call is cancelled.
      const call = new AbortController();
      const callSignal = AbortSignal.any([signal, call.signal]);
      const responses = this.client.threads.sendAndStream(request, { signal: callSignal });
      const iterator = responses[Symbol.asyncIterator]();
      const timer = setTimeout(
        () =>
          call.abort(
            new ConnectError(`no run within ${this.client.timeoutMs} ms`, Code.DeadlineExceeded),
          ),
        this.client.timeoutMs,
      );
      let first: IteratorResult<SendAndStreamResponse>;
      try {
        first = await iterator.next();
      } catch (e) {
        call.abort();
        const err = toPaiError(e);
        if (signal.aborted || !isTransient(err) || attempt >= this.client.retry.maxAttempts) {
          throw err;
        }
        await sleep(backoffMs(this.client.retry, attempt - 1, err), signal);
        continue;
      } finally {
        clearTimeout(timer);
      }
      const handle = first.done ? undefined : first.value.response;
      if (handle?.case !== "run") {
        call.abort();
        throw new Error("SendAndStream did not answer the run first");
      }
      const run = new RunRef(this.client, handle.value.runId, handle.value);
      const events = run.resume(options, eventsOf(iterator, call));
      return {
        run,
        [Symbol.asyncIterator]: () => events,
        close: () => {
          call.abort();
          void events.return(undefined);
        },
      };
    }
  }

  /** Starts a run with an operation input and no user message. */
  async trigger(
    input: JsonValue,
    options: MutationOptions & { runMetadata?: JsonObject } = {},
  ): Promise<RunRef> {
    const requestId = options.requestId ?? randomUUID();
    const r = await this.client.call(
      (o) =>
        this.client.threads.trigger(
          {
            threadId: this.id,
            input: fromJson(ValueSchema, input),
            requestId,
            runMetadata: options.runMetadata,
          },
          o,
        ),
      options,
    );
    if (!r.run) throw new Error("Trigger answered without a run");
    return new RunRef(this.client, r.run.runId, r.run);
  }

  /**
   * The thread head's changes after `afterVersion` (0: the current head first,
   * as a SNAPSHOT), until the thread is deleted. Like {@link RunRef.stream} it
   * reconnects on transport failures, resuming after the highest version
   * delivered; only consecutive failures without a change count against
   * `retry.maxAttempts`.
   */
  watch(options: WatchOptions = {}): AsyncGenerator<WatchThreadResponse, void, undefined> {
    let version = BigInt(options.afterVersion ?? 0);
    const signal = this.client.signal(options.signal);
    return resuming<WatchThreadResponse>({
      policy: this.client.retry,
      signal,
      open: () =>
        this.client.threads.watchThread({ threadId: this.id, afterVersion: version }, { signal }),
      advance: (change) => {
        const seen = change.thread?.version ?? 0n;
        if (seen > version) version = seen;
        return true;
      },
      isLast: (change) => change.change === ThreadChange.DELETED,
      doneAfterCleanEnd: async () => false, // a watch only ends with the thread
      endedEarly: "the thread's watch ended before the thread was deleted",
      onReconnect: (err, failures) => options.onReconnect?.(err, failures, version),
    });
  }

  /** The transcript, oldest first (every page). */
  async messages(control: CallControl = {}): Promise<Message[]> {
    const out: Message[] = [];
    let pageToken = "";
    do {
      const r = await this.client.call(
        (o) => this.client.threads.listMessages({ threadId: this.id, pageToken }, o),
        control,
      );
      out.push(...r.messages);
      pageToken = r.nextPageToken;
    } while (pageToken);
    return out;
  }
}

/** A run: its resumable event stream, its outcome, and the actions it waits for. */
export class RunRef {
  constructor(
    private readonly client: PaiClient,
    /** The run id (`run_...`). */
    readonly id: string,
    /**
     * What Send or Trigger answered (thread id, status then, and the user
     * message when it was committed at once); absent on {@link PaiClient.run}.
     */
    readonly handle?: RunHandle,
  ) {}

  /** Reads the run record and its open pending actions. */
  async get(control: CallControl = {}): Promise<{ run: Run; pendingActions: PendingAction[] }> {
    const r = await this.client.call((o) => this.client.runs.getRun({ runId: this.id }, o), control);
    if (!r.run) throw new Error("GetRun answered without a run");
    return { run: r.run, pendingActions: r.pendingActions };
  }

  /**
   * The run's events from after `afterSeq` until the run is terminal.
   *
   * When the stream breaks (UNAVAILABLE, a reset stream, a restarted server)
   * it reconnects after a jittered back-off and resumes after the last seq it
   * delivered, so no event is delivered twice or skipped. Seqs increase but
   * may skip after a lost execution: the recovered attempt starts with
   * `chunk.abort{reason: "recovery"}`, which means "discard the partial step
   * streamed since the last committed message". Only consecutive failures
   * without an event count against `retry.maxAttempts`; past it the last
   * error is thrown. An answer from the server (NOT_FOUND, ...) is never retried.
   */
  stream(options: StreamOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    return this.resume(options);
  }

  /**
   * {@link stream}, reading `opened` (a call already streaming the run's
   * events after `afterSeq`) before opening any StreamRun.
   * @internal
   */
  resume(
    options: StreamOptions,
    opened?: AsyncIterable<RunEvent>,
  ): AsyncGenerator<RunEvent, void, undefined> {
    let cursor = BigInt(options.afterSeq ?? 0);
    const signal = this.client.signal(options.signal);
    let first = opened;
    return resuming<RunEvent>({
      policy: this.client.retry,
      signal,
      open: () => {
        const call = first ?? this.events(cursor, signal);
        first = undefined;
        return call;
      },
      advance: (event) => {
        if (event.seq <= cursor) return false;
        cursor = event.seq;
        return true;
      },
      isLast: (event) => event.event.case === "status" && isTerminal(event.event.value.status),
      // A cursor already at the end of a finished run, or a server that went
      // away between messages: only the run's status tells.
      doneAfterCleanEnd: async () => isTerminal((await this.get(options)).run.status),
      endedEarly: "the run's stream ended before the run was terminal",
      onReconnect: (err, failures) => options.onReconnect?.(err, failures, cursor),
    });
  }

  private async *events(afterSeq: bigint, signal: AbortSignal): AsyncGenerator<RunEvent> {
    for await (const response of this.client.runs.streamRun({ runId: this.id, afterSeq }, { signal })) {
      if (response.event) yield response.event;
    }
  }

  /**
   * The text the run streams (its text deltas, every step's in order), once
   * the run is terminal. A recovery abort drops the text of the partial step
   * it supersedes, so the result is what the committed messages say.
   */
  async text(options: StreamOptions = {}): Promise<string> {
    let committed = "";
    let partial = "";
    for await (const event of this.stream(options)) {
      const e = event.event;
      if (e.case === "message") {
        committed += partial;
        partial = "";
      } else if (e.case === "chunk") {
        const c = e.value.chunk;
        if (c.case === "textDelta") partial += c.value.text;
        else if (c.case === "abort" && c.value.reason === "recovery") partial = "";
      }
    }
    return committed + partial;
  }

  /** Follows the run until it is terminal and returns its final record. */
  async wait(options: StreamOptions = {}): Promise<Run> {
    for await (const _ of this.stream(options)) {
      // Only the end of the stream matters here.
    }
    return (await this.get(options)).run;
  }

  /** Cancels a queued, running or waiting run. */
  async cancel(reason?: string, control: CallControl = {}): Promise<Run> {
    const r = await this.client.call(
      (o) => this.client.runs.cancelRun({ runId: this.id, reason }, o),
      control,
    );
    if (!r.run) throw new Error("CancelRun answered without a run");
    return r.run;
  }

  /** Approves a pending approval request. */
  approve(actionId: string, options: MutationOptions & { reason?: string } = {}): Promise<Run> {
    const approval = { approved: true, reason: options.reason };
    return this.resolve(actionId, { case: "approval", value: approval }, options);
  }

  /** Denies a pending approval request. */
  deny(actionId: string, options: MutationOptions & { reason?: string } = {}): Promise<Run> {
    const approval = { approved: false, reason: options.reason };
    return this.resolve(actionId, { case: "approval", value: approval }, options);
  }

  /** Submits the output of a client-executed tool. */
  submitToolResult(actionId: string, output: JsonValue, options: MutationOptions = {}): Promise<Run> {
    return this.resolve(
      actionId,
      { case: "toolResult", value: { result: { case: "output", value: fromJson(ValueSchema, output) } } },
      options,
    );
  }

  /** Reports that a client-executed tool failed. */
  submitToolError(actionId: string, errorText: string, options: MutationOptions = {}): Promise<Run> {
    return this.resolve(
      actionId,
      { case: "toolResult", value: { result: { case: "errorText", value: errorText } } },
      options,
    );
  }

  /** Supplies the data a data-collection suspend asked for. */
  submitData(actionId: string, data: JsonValue, options: MutationOptions = {}): Promise<Run> {
    return this.resolve(actionId, { case: "data", value: fromJson(ValueSchema, data) }, options);
  }

  private async resolve(
    actionId: string,
    resolution: Resolution,
    options: MutationOptions,
  ): Promise<Run> {
    const requestId = options.requestId ?? randomUUID();
    const r = await this.client.call(
      (o) =>
        this.client.runs.resolvePendingAction(
          { runId: this.id, actionId, resolution, requestId },
          o,
        ),
      options,
    );
    if (!r.run) throw new Error("ResolvePendingAction answered without a run");
    return r.run;
  }
}

type Resolution = NonNullable<
  Parameters<Client<typeof RunService>["resolvePendingAction"]>[0]["resolution"]
>;

/** A SendRequest for `text` (then `options.parts`) on `threadId`, with a request id. */
function sendRequest(threadId: string, text: string, options: SendOptions) {
  const parts: MessageInitShape<typeof MessagePartSchema>[] = [
    { part: { case: "text", value: { text } } },
    ...(options.parts ?? []),
  ];
  return {
    threadId,
    parts,
    metadata: options.metadata,
    requestId: options.requestId ?? randomUUID(),
    delivery: options.delivery ?? Delivery.UNSPECIFIED,
    runMetadata: options.runMetadata,
  };
}

/** The events of a SendAndStream call whose first response was read; cancels the call when left. */
async function* eventsOf(
  responses: AsyncIterator<SendAndStreamResponse>,
  call: AbortController,
): AsyncGenerator<RunEvent> {
  try {
    for (;;) {
      const next = await responses.next();
      if (next.done) return;
      if (next.value.response.case === "event") yield next.value.response.value;
    }
  } finally {
    call.abort();
  }
}
