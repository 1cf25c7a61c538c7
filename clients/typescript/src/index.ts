/** The pai-grpc TypeScript client: `PaiClient` plus the generated pai.v1 types. */
export { Code, ConnectError } from "@connectrpc/connect";
export * from "./client.js";
export * from "./errors.js";
export { DEFAULT_RETRY, NO_RETRY, type RetryPolicy, backoffMs, isTransient } from "./retry.js";
export * from "./gen/pai/v1/runs_pb.js";
export * from "./gen/pai/v1/threads_pb.js";
export * from "./gen/pai/v1/parts_pb.js";
export * from "./gen/pai/v1/chunks_pb.js";
export * from "./gen/pai/v1/thread_service_pb.js";
export * from "./gen/pai/v1/run_service_pb.js";
