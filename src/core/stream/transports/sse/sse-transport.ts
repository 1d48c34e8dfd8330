import { type EventFrames, encodeSseEvent } from '../../event-frames.js';
import { EventStreamResponse } from '../../event-stream-response.js';
import type { FrameType, StreamTransport } from '../../stream-transport.js';

/**
 * A server-sent events response (`GET /sessions/{id}/events`, docs/http-api.md). The frames are the
 * WebSocket protocol's JSON, one per SSE event: events unnamed with `id:` = the event id (so that
 * `Last-Event-ID` resumes like `since`), the others named by their frame type (`subscribe_ack`,
 * `snapshot`, `subscribe_error`, `lag_warning`, and `stream_error` for an `error` frame, since `error` is
 * EventSource's own connection event), and a last `close` event carrying the code and
 * reason a WebSocket close frame would.
 */
export class SseTransport extends EventStreamResponse implements StreamTransport {
  readonly kind = 'sse' as const;

  encode(text: string, type: FrameType, eventId: string | null = null): Buffer {
    if (type === 'event') return encodeSseEvent(text, null, eventId);
    // `error` is EventSource's own event (the connection failed): the frame gets another name.
    return encodeSseEvent(text, type === 'error' ? 'stream_error' : type, null);
  }

  encodeEvent(frames: EventFrames): Buffer {
    return frames.sseFrame();
  }

  close(code: number, reason: string): void {
    if (!this.isOpen()) return;
    this.response.end(encodeSseEvent(JSON.stringify({ type: 'close', code, reason }), 'close', null));
  }
}
