/** The TCP proxy that cuts or blackholes a link (bench/faults.ts, shared with the benchmark rows). */
export { startProxy, type TcpProxy } from "../../bench/faults.js";
