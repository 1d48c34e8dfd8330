import type { ServerResponse } from 'node:http';
import { type EventFrames, encodeSseEvent } from '../../event-frames.js';
import type { FrameType, StreamTransport, TransportHandlers } from '../../stream-transport.js';

/** An SSE comment: ignored by every parser (WHATWG HTML §9.2.6), it keeps proxies and idle timeouts off. */
export const KEEP_ALIVE = Buffer.from(': ping\n\n');

/**
 * A server-sent events response (`GET /sessions/{id}/events`, docs/http-api.md). The frames are the
 * WebSocket protocol's JSON, one per SSE event: events unnamed with `id:` = the event id (so that
 * `Last-Event-ID` resumes like `since`), the others named by their frame type (`subscribe_ack`,
 * `snapshot`, `subscribe_error`, `lag_warning`, and `stream_error` for an `error` frame, since `error` is
 * EventSource's own connection event), and a last `close` event carrying the code and
 * reason a WebSocket close frame would.
 */
export class SseTransport implements StreamTransport {
  readonly kind = 'sse' as const;
  readonly answersPings = false;
  readonly singleSubscription = true;

  constructor(private readonly response: ServerResponse) {}

  get writableHighWaterMark(): number {
    return this.response.writableHighWaterMark;
  }

  isOpen(): boolean {
    return !this.response.writableEnded && !this.response.destroyed;
  }

  bufferedAmount(): number {
    return this.response.writableLength;
  }

  encode(text: string, type: FrameType, eventId: string | null = null): Buffer {
    if (type === 'event') return encodeSseEvent(text, null, eventId);
    // `error` is EventSource's own event (the connection failed): the frame gets another name.
    return encodeSseEvent(text, type === 'error' ? 'stream_error' : type, null);
  }

  encodeEvent(frames: EventFrames): Buffer {
    return frames.sseFrame();
  }

  write(data: Buffer): void {
    if (this.isOpen()) this.response.write(data);
  }

  cork(): void {
    this.response.cork();
  }

  uncork(): void {
    this.response.uncork();
  }

  close(code: number, reason: string): void {
    if (!this.isOpen()) return;
    this.response.end(encodeSseEvent(JSON.stringify({ type: 'close', code, reason }), 'close', null));
  }

  ping(): void {
    this.write(KEEP_ALIVE);
  }

  listen(handlers: TransportHandlers): void {
    // 'close' fires when the response ended or the client went away, whichever comes first.
    this.response.on('close', () => handlers.close());
    this.response.on('error', (error) => handlers.error(error));
    this.response.on('drain', () => handlers.drain());
  }
}
