/**
 * Lets a unary call's request frames go once its message is read.
 *
 * grpc-js 1.14's message decoder keeps the HTTP/2 data frames of the last
 * message it read (and a slice of the first) until the next message starts.
 * On a unary call no next message comes, so a unary Enqueue waiting on a slow
 * or hung Redis held its request twice: as the message and as the frames it
 * was copied from (bench row 11, the server's memory while Redis hangs).
 *
 * This interceptor goes innermost, where it is given grpc-js's own call, and
 * empties that call's decoder once the message is read, when the decoder is
 * between messages (the message is already a copy of the frames). A grpc-js
 * whose call has no such decoder is left alone (test/grpc/unary-frames.test.ts
 * notices). Streaming requests are not wrapped: the next message frees the
 * last one's frames, so a stream holds at most one message's.
 */
import * as grpc from "@grpc/grpc-js";

/** The part of grpc-js's StreamDecoder (stream-decoder.ts) this touches. */
interface FrameDecoder {
  readState: number;
  readCompressFlag: Buffer;
  readPartialMessage: Buffer[];
}

/** StreamDecoder's state between messages (ReadState.NO_DATA). */
const BETWEEN_MESSAGES = 0;

function decoderOf(call: grpc.ServerInterceptingCallInterface): FrameDecoder | undefined {
  const decoder = (call as { decoder?: Partial<FrameDecoder> }).decoder;
  return decoder && Array.isArray(decoder.readPartialMessage) && typeof decoder.readState === "number" && Buffer.isBuffer(decoder.readCompressFlag)
    ? (decoder as FrameDecoder)
    : undefined;
}

/** The interceptor; give it first, so that it is innermost. */
export function releaseUnaryFrames(): grpc.ServerInterceptor {
  return (method, call) => {
    const decoder = method.requestStream ? undefined : decoderOf(call);
    // grpc-js chains whatever an interceptor returns; its type asks for the class, which this call may not be.
    if (!decoder) return call as grpc.ServerInterceptingCall;
    return new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMessage: (message, pass) => {
            if (decoder.readState === BETWEEN_MESSAGES) {
              decoder.readPartialMessage = [];
              decoder.readCompressFlag = Buffer.alloc(1);
            }
            pass(message);
          },
        }),
    });
  };
}
