import { encodeDeliveries } from "../../dist/grpc/delivery-wire.js";
import { fromBinary } from "@bufbuild/protobuf";
import { LeaseResponseSchema } from "../../dist/gen/switchyard/v1/queue_pb.js";
import { decodeItem } from "../../dist/queue/envelope.js";
const vi = (n) => { n = BigInt.asUintN(64, BigInt(n)); const o = []; do { let b = Number(n & 127n); n >>= 7n; o.push(n ? b | 128 : b); } while (n); return Buffer.from(o); };
for (const t of [-1, -1500, 1, 1700000000123, 2 ** 53, -(2 ** 53)]) {
  const v = Buffer.concat([Buffer.from("SYE1\x0a\x01A\x20"), vi(t)]);
  const item = decodeItem(v);
  const enc = encodeDeliveries([{ token: "r.1.x.y", fence: 1, deliveryCount: 1, queue: "{q}", item, lastError: "" }]);
  const bytes = enc.bytes ?? enc.buf ?? enc;
  try {
    const m = fromBinary(LeaseResponseSchema, Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes));
    const d = m.kind.value.deliveries[0];
    console.log(t, "item.t", item.enqueueTimeMs, "->", d.enqueueTime?.seconds, d.enqueueTime?.nanos, "queue", d.queue, "count", d.deliveryCount);
  } catch (e) { console.log(t, "item.t", item.enqueueTimeMs, "DECODE FAIL", e.message); }
}
