/**
 * STREAM queues (issue 16) against a model: random enqueues, settles (ack,
 * drop, retry) and stream closes on one queue with two consumer groups, each
 * read by one Lease stream at a random credit. After every step the model says
 * which entries each group must be sent next and with which delivery count;
 * at the end every entry was acked or dropped once per group or dead-lettered,
 * and Redis agrees (pending lists empty, dead letters counted). Seeded:
 * SWITCHYARD_STREAM_MODEL_SEEDS=n runs n seeds (default 2), SWITCHYARD_STREAM_MODEL_STEPS
 * the steps of each (default 60).
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../../src/client/client.js";
import { below, random } from "../helpers/random.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const SEEDS = Number(process.env.SWITCHYARD_STREAM_MODEL_SEEDS ?? 2);
const STEPS = Number(process.env.SWITCHYARD_STREAM_MODEL_STEPS ?? 60);
const MAX_DELIVERIES = 3;
const GROUPS = ["a", "b"];
const t = useSwitchyard();

/** One group's view of one entry. */
interface EntryState {
  /** Deliveries so far. */
  count: number;
  state: "waiting" | "held" | "done" | "dead";
  token?: string;
}

/** One group: its stream, its credit and what it knows of each entry. */
interface GroupModel {
  name: string;
  lease: LeaseSession;
  credit: number;
  entries: Map<string, EntryState>;
}

const inState = (g: GroupModel, s: EntryState["state"]) => [...g.entries].filter(([, e]) => e.state === s);

describe("stream queues against a model", () => {
  for (let seed = 1; seed <= SEEDS; seed++) {
    it(`seed ${seed}: every entry reaches each group until settled, with the count the model expects`, { timeout: 120_000 }, async () => {
      const next = random(seed);
      const Q = `{model-${seed}}`;
      await t.sy.client.createQueue({
        name: Q, mode: QueueMode.STREAM, groups: GROUPS.map((name) => ({ name, startId: "0" })),
        maxDeliveries: MAX_DELIVERIES, minIdle: durationFromMs(600_000),
      });
      const open = (name: string, credit: number) => t.sy.client.lease(Q, credit, { group: name });
      const groups: GroupModel[] = GROUPS.map((name) => {
        const credit = 1 + below(next, 5);
        return { name, lease: open(name, credit), credit, entries: new Map() };
      });

      /** Takes what the model says the group's stream receives now, and checks each delivery. */
      const receive = async (g: GroupModel) => {
        const room = g.credit - inState(g, "held").length;
        const n = Math.min(room, inState(g, "waiting").length);
        if (n <= 0) return;
        const got: Delivery[] = await g.lease.take(n);
        for (const d of got) {
          const e = g.entries.get(d.id);
          expect(e?.state, `group ${g.name}: ${d.id} delivered while ${e?.state}`).toBe("waiting");
          e!.count++;
          expect(d.deliveryCount, `group ${g.name}: ${d.id}'s delivery count`).toBe(e!.count);
          e!.state = "held";
          e!.token = d.leaseToken;
        }
      };

      for (let step = 0; step < STEPS; step++) {
        const g = groups[below(next, groups.length)];
        const held = inState(g, "held");
        const op = below(next, 10);
        if (op < 3 || held.length === 0) {
          const ids = await t.sy.client.enqueue(Q, Array.from({ length: 1 + below(next, 4) }, (_, i) => `s${step}-${i}`));
          for (const m of groups) for (const id of ids) m.entries.set(id, { count: 0, state: "waiting" });
        } else if (op < 8) {
          const [id, e] = held[below(next, held.length)];
          const how = below(next, 3);
          if (how === 0) await t.sy.client.ack(e.token!);
          else if (how === 1) await t.sy.client.drop(e.token!);
          else {
            const r = await t.sy.client.retry(e.token!, { reason: `step ${step}` });
            expect(r.deadLettered, `${id} dead-lettered at delivery ${e.count}`).toBe(e.count >= MAX_DELIVERIES);
            e.state = r.deadLettered ? "dead" : "waiting";
          }
          if (how < 2) e.state = "done";
          // A settled token holds nothing any more.
          await expect(t.sy.client.ack(e.token!)).rejects.toMatchObject({ code: 9 });
        } else {
          // The stream ends: what it held goes back at once; the reclaim that takes it counts a
          // delivery, so an entry delivered max_deliveries times is dead-lettered there instead.
          await g.lease.close();
          for (const [, e] of held) e.state = e.count >= MAX_DELIVERIES ? "dead" : "waiting";
          g.credit = 1 + below(next, 5);
          g.lease = open(g.name, g.credit);
        }
        for (const m of groups) await receive(m);
      }

      // Drain: every group acks what it holds and takes the rest.
      for (const g of groups) {
        for (let round = 0; round < 1000 && (inState(g, "held").length > 0 || inState(g, "waiting").length > 0); round++) {
          for (const [, e] of inState(g, "held")) {
            await t.sy.client.ack(e.token!);
            e.state = "done";
          }
          await receive(g);
        }
        await g.lease.close();
      }
      // Entries a closed stream handed back at their last delivery are dead-lettered by the group's next reclaim.
      const dead = groups.reduce((n, g) => n + inState(g, "dead").length, 0);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).deadLetter).toBe(BigInt(dead));
      const stats = await t.sy.client.getQueueStats(Q);
      for (const g of groups) {
        expect(inState(g, "done").length + inState(g, "dead").length).toBe(g.entries.size);
        expect(stats.groups.find((s) => s.name === g.name)).toMatchObject({ pending: 0n, lag: 0n });
      }
      expect(stats.completedTotal).toBe(BigInt(groups.reduce((n, g) => n + inState(g, "done").length, 0)));
    });
  }
});
