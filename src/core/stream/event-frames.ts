import * as ws from 'ws';
import type { MetisEvent } from '../events/envelope.js';
import { eventJson } from '../events/event-json.js';

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

/**
 * One event's frame in each transport's encoding, each built at most once however many clients get
 * it (the hub hands the same instance to every target).
 */
export class EventFrames {
  private json: string | null = null;
  private websocket: Buffer | null = null;
  private sse: Buffer | null = null;

  constructor(readonly event: MetisEvent) {}

  /** The frame's JSON text, the same on every transport: `{"type":"event","event":{...}}`. */
  text(): string {
    this.json ??= `{"type":"event","event":${eventJson(this.event)}}`;
    return this.json;
  }

  webSocketFrame(): Buffer {
    this.websocket ??= encodeTextFrame(this.text());
    return this.websocket;
  }

  sseFrame(): Buffer {
    this.sse ??= encodeSseEvent(this.text(), null, this.event.id);
    return this.sse;
  }
}

/**
 * A server-sent event (WHATWG HTML §9.2): `id:` when given (what `Last-Event-ID` sends back on a
 * reconnect), `event:` when named (an unnamed event reaches `onmessage`), then the data. JSON text has
 * no line breaks, so it is always one `data:` line.
 */
export function encodeSseEvent(data: string, name: string | null, id: string | null): Buffer {
  return Buffer.from(
    `${id === null ? '' : `id: ${id}\n`}${name === null ? '' : `event: ${name}\n`}data: ${data}\n\n`,
  );
}
