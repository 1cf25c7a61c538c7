/**
 * Typed errors of the pai-grpc API.
 *
 * The server answers every failure with a gRPC status whose details carry a
 * `google.rpc.ErrorInfo` (a stable UPPER_SNAKE `reason` in domain `pai.v1`),
 * plus `RetryInfo` when a retry may succeed later (UNAVAILABLE while a server
 * shuts down, RESOURCE_EXHAUSTED from per-scope limits) and `BadRequest` field
 * violations for INVALID_ARGUMENT. {@link toPaiError} turns a ConnectError into
 * the matching {@link PaiError} subclass with those details decoded.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";

/** The ErrorInfo domain of every error the pai-grpc services put on the wire. */
export const ERROR_DOMAIN = "pai.v1";

/** One bad field of a request (google.rpc.BadRequest.FieldViolation). */
export interface FieldViolation {
  field: string;
  description: string;
}

/** Any failed call: the gRPC code, the ErrorInfo reason and the retry hint. */
export class PaiError extends Error {
  /** The gRPC status code. */
  readonly code: Code;
  /** ErrorInfo.reason, e.g. `RUN_NOT_FOUND`; the code's gRPC name when the server sent none. */
  readonly reason: string;
  /** ErrorInfo.domain (`pai.v1` for the runtime's errors); empty without ErrorInfo. */
  readonly domain: string;
  /** ErrorInfo.metadata. */
  readonly metadata: Readonly<Record<string, string>>;
  /** RetryInfo.retry_delay in milliseconds, when the server suggested one. */
  readonly retryDelayMs: number | undefined;
  /** BadRequest field violations (INVALID_ARGUMENT). */
  readonly violations: readonly FieldViolation[];
  /** Whether the status came from the server (ErrorInfo present), not the transport. */
  readonly fromServer: boolean;

  constructor(cause: ConnectError) {
    const info = cause.findDetails(ErrorInfoSchema)[0];
    const reason = info?.reason || grpcCodeName(cause.code);
    super(`${grpcCodeName(cause.code)} ${reason}: ${cause.rawMessage}`, { cause });
    this.name = new.target.name;
    this.code = cause.code;
    this.fromServer = info !== undefined;
    this.reason = reason;
    this.domain = info?.domain ?? "";
    this.metadata = { ...(info?.metadata ?? {}) };
    const retry = cause.findDetails(RetryInfoSchema)[0]?.retryDelay;
    this.retryDelayMs =
      retry === undefined ? undefined : Number(retry.seconds) * 1000 + retry.nanos / 1e6;
    this.violations = cause
      .findDetails(BadRequestSchema)
      .flatMap((b) => b.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
  }

  /** The gRPC name of the code, e.g. `NOT_FOUND`. */
  get codeName(): string {
    return grpcCodeName(this.code);
  }
}

/** The gRPC spelling of a code: `NOT_FOUND`, `CANCELLED`, ... */
export function grpcCodeName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  const name = Code[code];
  return name ? name.replace(/(?<=[a-z])(?=[A-Z])/g, "_").toUpperCase() : `CODE_${code}`;
}

/** INVALID_ARGUMENT: the request is malformed; {@link PaiError.violations} name the fields. */
export class InvalidArgumentError extends PaiError {}
/** NOT_FOUND: no such resource in the caller's scope. */
export class NotFoundError extends PaiError {}
/** FAILED_PRECONDITION: the resource's status forbids the operation (e.g. the run is not waiting). */
export class FailedPreconditionError extends PaiError {}
/** ABORTED: a version or etag conflict. */
export class ConflictError extends PaiError {}
/** ALREADY_EXISTS. */
export class AlreadyExistsError extends PaiError {}
/** UNAUTHENTICATED: no or a bad credential. */
export class UnauthenticatedError extends PaiError {}
/** PERMISSION_DENIED: the identity may not do this. */
export class PermissionDeniedError extends PaiError {}
/** RESOURCE_EXHAUSTED: a limit was hit; {@link PaiError.retryDelayMs} says when to try again. */
export class ResourceExhaustedError extends PaiError {}
/** UNAVAILABLE: the server is unreachable or shutting down (after the client's own retries). */
export class UnavailableError extends PaiError {}
/** CANCELLED: the call was cancelled (by the caller's AbortSignal, typically). */
export class CancelledError extends PaiError {}
/** DEADLINE_EXCEEDED: the call's timeout passed. */
export class DeadlineExceededError extends PaiError {}

const BY_CODE: Partial<Record<Code, new (cause: ConnectError) => PaiError>> = {
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.NotFound]: NotFoundError,
  [Code.FailedPrecondition]: FailedPreconditionError,
  [Code.Aborted]: ConflictError,
  [Code.AlreadyExists]: AlreadyExistsError,
  [Code.Unauthenticated]: UnauthenticatedError,
  [Code.PermissionDenied]: PermissionDeniedError,
  [Code.ResourceExhausted]: ResourceExhaustedError,
  [Code.Unavailable]: UnavailableError,
  [Code.Canceled]: CancelledError,
  [Code.DeadlineExceeded]: DeadlineExceededError,
};

/** The typed error for anything a call threw (a PaiError passes through unchanged). */
export function toPaiError(e: unknown): PaiError {
  if (e instanceof PaiError) return e;
  const cause = ConnectError.from(e);
  const Type = BY_CODE[cause.code] ?? PaiError;
  return new Type(cause);
}
