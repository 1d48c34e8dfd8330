import WebSocket from 'ws';

/** A raw protocol client for the conformance suite: records every frame, answers nothing by itself. */
export interface WireClient {
  readonly frames: any[];
  events(): any[];
  send(frame: unknown): void;
  waitFor(predicate: (frame: any) => boolean, timeoutMs?: number, what?: string): Promise<any>;
  readonly closed: Promise<{ code: number; reason: string }>;
  /** Stops reading from the socket (a stalled client). */
  pause(): void;
  resume(): void;
  close(): void;
}

export function openWire(
  wsUrl: string,
  options: {
    answerPings?: boolean;
    /** Whether the WebSocket library answers protocol pings, as every generic client does (default). */
    protocolPongs?: boolean;
    token?: string;
  } = {},
): Promise<WireClient> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl, {
      autoPong: options.protocolPongs !== false,
      ...(options.token ? { headers: { authorization: `Bearer ${options.token}` } } : {}),
    });
    const frames: any[] = [];
    const waiters: { predicate: (f: any) => boolean; resolve: (f: any) => void }[] = [];
    let closedResolve!: (v: { code: number; reason: string }) => void;
    const closed = new Promise<{ code: number; reason: string }>((r) => {
      closedResolve = r;
    });
    ws.on('message', (data) => {
      let frame: any;
      try {
        frame = JSON.parse(String(data));
      } catch {
        frame = { type: '(unparseable)', raw: String(data).slice(0, 200) };
      }
      frames.push(frame);
      if (frame.type === 'ping' && options.answerPings !== false)
        ws.send(JSON.stringify({ type: 'pong', nonce: frame.nonce }));
      for (const waiter of [...waiters]) {
        if (waiter.predicate(frame)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(frame);
        }
      }
    });
    ws.on('close', (code, reason) => closedResolve({ code, reason: String(reason) }));
    ws.on('error', (error) => reject(error));
    ws.on('open', () =>
      resolve({
        frames,
        events: () => frames.filter((f) => f.type === 'event').map((f) => f.event),
        send: (frame) => ws.send(JSON.stringify(frame)),
        waitFor: (predicate, timeoutMs = 10_000, what = 'a frame') => {
          const found = frames.find(predicate);
          if (found) return Promise.resolve(found);
          return new Promise((res, rej) => {
            const timer = setTimeout(
              () => rej(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
              timeoutMs,
            );
            waiters.push({
              predicate,
              resolve: (f) => {
                clearTimeout(timer);
                res(f);
              },
            });
          });
        },
        closed,
        pause: () => (ws as unknown as { _socket: { pause(): void } })._socket.pause(),
        resume: () => (ws as unknown as { _socket: { resume(): void } })._socket.resume(),
        close: () => ws.terminate(),
      }),
    );
  });
}
