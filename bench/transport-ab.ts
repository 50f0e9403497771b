/**
 * A/B of the server's transport settings (issue 13), interleaved: two
 * Switchyard server children on one Redis, each with the settings of one side
 * forced by stage-hooks.ts (SY_NAGLE, SY_H2_WINDOW), each with its own
 * producer and worker processes, and a plain grpc-js echo server per side set
 * the same way. Each measure runs its rounds on both sides, the side that goes
 * first alternating round by round.
 * `--a-node-args` / `--b-node-args` give a side's server (and its echo server)
 * Node flags too, say `--v8-pool-size=1` against none with `--a "" --b ""`:
 * both sides in one run, so the host's drift between runs is not read as the
 * flag's effect (bench/README.md, 7 December, evening).
 *
 *   node dist-bench/transport-ab.js [--a SY_H2_WINDOW=0] [--b SY_H2_WINDOW=1048576] [--rounds 5]
 *        [--a-node-args "FLAGS"] [--b-node-args "FLAGS"]
 *        [--rate 500] [--items 1500] [--serial 2000] [--batched 30000] [--echo 3000]
 */
import { loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Deployed } from "./deployed.js";
import { startBenchRedis } from "./env.js";
import { leftovers, spread } from "./lib.js";
import { Rounds } from "./rounds.js";
import { fmtMs, fmtRate, markdownTable } from "./table.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
};
const num = (name: string, def: number) => Number(arg(name, String(def)));
const ROUNDS = num("rounds", 5);
const RATE = num("rate", 500);
const ITEMS = num("items", 1500);
const SERIAL = num("serial", 2000);
const BATCHED = num("batched", 30_000);
const ECHO = num("echo", 3000);
const SIDES = { a: arg("a", "SY_H2_WINDOW=0"), b: arg("b", "SY_H2_WINDOW=1048576") };
type Side = keyof typeof SIDES;
/** Each side's Node flags for its server and echo server. */
const flags = (name: string) => arg(name, "").split(" ").filter(Boolean);
const NODE_ARGS: Record<Side, string[]> = { a: flags("a-node-args"), b: flags("b-node-args") };
/** A side as the table names it: its environment, and its Node flags if any. */
const label = (side: Side) => [SIDES[side] || "(no settings)", ...NODE_ARGS[side]].join(" ");

/** "K=V,K2=V2" as an environment. */
const envOf = (spec: string) => Object.fromEntries(spec.split(",").filter(Boolean).map((kv) => kv.split("=") as [string, string]));

async function main(): Promise<void> {
  const load0 = loadavg();
  const redis = await startBenchRedis();
  leftovers.add(redis.server.process);
  const start = (side: Side) =>
    Deployed.start(redis, { systems: ["switchyard"], workers: 1, serverNodeArgs: [...NODE_ARGS[side], "--import", join(here, "stage-hooks.js")], serverEnv: envOf(SIDES[side]) });
  const sides = { a: await start("a"), b: await start("b") };
  const rounds = new Rounds(ROUNDS);
  try {
    for (const d of Object.values(sides)) {
      await d.latency("switchyard", RATE, 200, 50, 10); // warm-up
      await d.enqueue("switchyard", 10_000, 1000, 1);
    }
    /** Each measure, run on one side. */
    const measures: [string, (side: Side) => Promise<void>][] = [
      [`latency ${RATE}/s`, async (side) => {
        const xs = await sides[side].latencySamples("switchyard", RATE, ITEMS, 250, 10);
        const s = spread(xs);
        for (const p of ["p50", "p90", "p99", "max"] as const) rounds.record(`lat.${p}.${side}`, s[p]);
        rounds.record(`over35.${side}`, xs.filter((x) => x >= 35).length);
      }],
      ["serial enqueue", async (side) => rounds.record(`serial.${side}`, await sides[side].enqueue("switchyard", SERIAL, 1, 1))],
      ["enqueue 1000 per call", async (side) => rounds.record(`batched.${side}`, await sides[side].enqueue("switchyard", BATCHED, 1000, 1))],
      ["echo unary", async (side) => rounds.record(`unary.${side}`, await sides[side].echo("unary", ECHO, 140))],
      ["echo stream", async (side) => rounds.record(`stream.${side}`, await sides[side].echo("stream", ECHO, 140))],
    ];
    // Each measure's rounds on their own, so that the two sides take turns going first: in one list of
    // all measures the rotation kept a just before b in most rounds, and the side that ran first read
    // the lower p99 whichever flags it had (bench/README.md, 7 December, evening).
    for (const [name, run] of measures) await rounds.interleaved(name, (["a", "b"] as const).map((side) => [`${name}, ${side}`, () => run(side)]));
  } finally {
    await Promise.all(Object.values(sides).map((d) => d.stop()));
    await redis.stop();
  }
  const row = (what: string, key: string, fmt: (x: number) => string) => [
    what, fmt(rounds.med(`${key}.a`)), fmt(rounds.med(`${key}.b`)), rounds.samples.get(`${key}.a`)!.map(fmt).join(" · "), rounds.samples.get(`${key}.b`)!.map(fmt).join(" · "),
  ];
  const table = markdownTable(
    ["measure (median of rounds)", `a: ${label("a")}`, `b: ${label("b")}`, "rounds, a", "rounds, b"],
    [
      ...["p50", "p90", "p99", "max"].map((p) => row(`enqueue→handler at ${RATE}/s, c = 10, ${p}`, `lat.${p}`, fmtMs)),
      row(`… items ≥ 35 ms (of ${ITEMS})`, "over35", String),
      row("serial enqueue (await each)", "serial", fmtRate),
      row("enqueue, 1000 items per call, one at a time", "batched", fmtRate),
      row("plain grpc-js echo, serial unary calls", "unary", fmtRate),
      row("plain grpc-js echo, serial stream messages", "stream", fmtRate),
    ],
  );
  const fmtLoad = (l: number[]) => l.map((x) => x.toFixed(2)).join(" / ");
  process.stdout.write(`\n${table}\n\nload average ${fmtLoad(load0)} at the start, ${fmtLoad(loadavg())} at the end; medians of ${ROUNDS} rounds\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`transport-ab failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  for (const p of leftovers) p.kill("SIGKILL");
  process.exit(1);
});
