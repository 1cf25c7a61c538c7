/**
 * Shared helpers of the client tests. They run against a real `pai-grpc serve`
 * whose address is in PAI_ADDRESS (tests/test_typescript_client.py starts it).
 */
import { clone, equals } from "@bufbuild/protobuf";
import { PaiClient, type PaiClientOptions } from "../src/index.js";
import { type RunEvent, RunEventSchema } from "../src/gen/pai/v1/runs_pb.js";

/** The server under test. */
export function address(): string {
  const value = process.env.PAI_ADDRESS;
  if (!value) throw new Error("PAI_ADDRESS is not set: run these tests through tests/test_typescript_client.py");
  return value;
}

/** A client of the server under test; the caller closes it. */
export function connect(options: Partial<PaiClientOptions> = {}): PaiClient {
  return new PaiClient({ address: address(), ...options });
}

/** The event without its timestamp, for comparing live delivery with the log. */
function withoutTime(event: RunEvent): RunEvent {
  const copy = clone(RunEventSchema, event);
  copy.time = undefined;
  return copy;
}

/** Whether two events are the same entry of the log (ignoring their timestamps). */
export function sameEvent(a: RunEvent, b: RunEvent): boolean {
  return equals(RunEventSchema, withoutTime(a), withoutTime(b));
}

/** Whether an event is the `chunk.abort{reason: "recovery"}` marker of a recovered run. */
export function isRecoveryAbort(event: RunEvent): boolean {
  return (
    event.event.case === "chunk" &&
    event.event.value.chunk.case === "abort" &&
    event.event.value.chunk.value.reason === "recovery"
  );
}

/** Collects an async iterable. */
export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** A message long enough that the offline model is still streaming it seconds later. */
export function longText(words: number): string {
  return Array.from({ length: words }, (_, i) => `w${i}`).join(" ");
}
