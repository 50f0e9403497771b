/** What the prefetch tests share: a held handler, the server's view of stream credit, and a fresh read of a queue. */
import type { Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import type { TestSwitchyard } from "./switchyard.js";

/** A delivery's payload as text. */
export const text = (d: Delivery) => Buffer.from(d.payload).toString();

/** The credit of the open streams of `queue` on instance `on`. */
export const credits = (on: TestSwitchyard, queue: string) =>
  [...(on.app.queues["streams"] as Set<LeaseStream>)].filter((s) => s.queue === queue && !s.closed).map((s) => s.credit);

/** A handler that holds every delivery until the test lets it go. */
export function held() {
  const started: Delivery[] = [];
  const finish: (() => void)[] = [];
  return { started, finish, handler: (d: Delivery) => (started.push(d), new Promise<void>((ok) => finish.push(ok))) };
}

/** The next `n` deliveries of `queue` as [payload, delivery count], through a fresh stream on `on`. */
export async function next(on: TestSwitchyard, queue: string, n: number, group = ""): Promise<[string, number][]> {
  const lease = on.client.lease(queue, n, { group });
  const got = await lease.take(n);
  await lease.close();
  return got.map((d) => [text(d), d.deliveryCount]);
}
