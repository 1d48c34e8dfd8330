import type { EventFrames } from './event-frames.js';

export interface TransportHandlers {
  /** A frame from the client (WebSocket only: an SSE stream is one-way). */
  message(data: unknown, isBinary: boolean): void;
  /** A protocol-level pong: liveness. */
  pong(): void;
  close(): void;
  error(error: Error): void;
  /** The socket took what was buffered: queued frames may go on. */
  drain(): void;
}

/** The `type` of a server-to-client frame (streaming §4.2) a connection writes. */
export type FrameType =
  | 'event'
  | 'subscribe_ack'
  | 'snapshot'
  | 'subscribe_error'
  | 'error'
  | 'lag_warning'
  | 'ping'
  | 'pong';

/**
 * The transports a client connection runs on: the protocol's own (a WebSocket, its SSE twin), and a
 * turn's own stream in another protocol (the AI SDK's UI message stream, AG-UI; turn-transport.ts).
 */
export type TransportKind = 'websocket' | 'sse' | 'ai-sdk' | 'ag-ui';

/**
 * What a client connection writes its frames through (client-connection.ts): the subscription, its
 * queue, backpressure and heartbeats are the same on every transport; only the framing, the close and
 * the keep-alive differ.
 */
export interface StreamTransport {
  readonly kind: TransportKind;
  /**
   * Whether the client answers the server's pings (WebSocket: a JSON pong, or the library's protocol
   * pong), so that three unanswered close it. An SSE client cannot answer; a dead one is found by the
   * writes that fail and by backpressure.
   */
  readonly answersPings: boolean;
  /** Whether the transport carries one subscription only, so that a subscribe error ends it. */
  readonly singleSubscription: boolean;
  readonly writableHighWaterMark: number;
  isOpen(): boolean;
  /** Bytes written but not yet taken by the kernel. */
  bufferedAmount(): number;
  /**
   * A whole frame for this JSON text, of the `type` the caller names (and, for an `event` frame, with
   * its event's id): nothing is read back out of the text. Empty when the transport has no such frame.
   */
  encode(text: string, type: FrameType, eventId?: string | null): Buffer;
  /** An event's frame, shared by every client of the same transport; empty when it carries nothing. */
  encodeEvent(frames: EventFrames): Buffer;
  write(data: Buffer): void;
  cork(): void;
  uncork(): void;
  /**
   * Closes with a code and a reason (a WebSocket close frame; an SSE `close` event, then the end; the
   * protocol's error event on a turn's stream, or its normal end for `CLOSE.normal`).
   */
  close(code: number, reason: string): void;
  /** The transport's own keep-alive: a WebSocket ping, an SSE comment. */
  ping(): void;
  listen(handlers: TransportHandlers): void;
}
