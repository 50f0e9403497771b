/** A Lease call over plain HTTP/2 that never reads, or never opens (bench/faults.ts, shared with the benchmark rows). */
export { rawLease, type RawLease } from "../../bench/faults.js";
