/** Switchyard's TypeScript client. */
export { SwitchyardClient, LeaseSession, type ItemInput, type Reply, type ClientOptions, type CallOptions } from "./client.js";
export { runWorker, SettleError, type Worker, type WorkerOptions, type HandlerResult, type HandlerContext } from "./worker.js";
export { errorDetails, errorReason, type ErrorReason, type StatusDetails } from "./errors.js";
export * from "../gen/switchyard/v1/queue_pb.js";
export * from "../gen/switchyard/v1/cron_pb.js";
