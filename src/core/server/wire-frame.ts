import * as ws from 'ws';

/** The part of `ws`'s Sender used here; @types/ws does not declare the class, the package exports it. */
interface WsFramer {
  frame(
    data: Buffer,
    options: { fin: boolean; opcode: number; mask: boolean; readOnly: boolean; rsv1: boolean },
  ): Buffer[];
}
const { Sender } = ws as unknown as { Sender: WsFramer };

const TEXT_FRAME = { fin: true, opcode: 0x01, mask: false, readOnly: false, rsv1: false };

/**
 * A server-to-client WebSocket text frame, built by `ws`'s own framer once per event and written as
 * it is to every client that gets it: no per-client UTF-8 encoding and no per-client framing. The
 * server runs `ws` without permessage-deflate, so the `ws` sender never holds frames back, and a frame
 * written here cannot overtake or split one that `ws` writes.
 */
export function encodeTextFrame(text: string): Buffer {
  const [header, payload] = Sender.frame(Buffer.from(text, 'utf8'), TEXT_FRAME);
  return payload === undefined ? header! : Buffer.concat([header!, payload]);
}
