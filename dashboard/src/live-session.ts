import { useEffect, useRef, useState } from 'preact/hooks';
import { type ClientFailure, type ConversationState, MetisClient } from '../../src/client/browser.js';
import { accessKey } from './access-key.js';
import { eventIdMillis } from './format.js';
import { EMPTY_MODEL, fromSnapshot, type SessionModel, step, type TurnFigures } from './session-model.js';

export type Link = 'connecting' | 'connected' | 'reconnecting' | 'stopped';

export interface LiveSession {
  readonly state: ConversationState;
  readonly link: Link;
  /** What the transport did last, for the indicator: "resumed, 12 events replayed". */
  readonly note: string | null;
  readonly failure: ClientFailure | null;
  /** Token counts of ended turns (the reducer keeps their cost, not their tokens). */
  readonly figures: Readonly<Record<string, TurnFigures>>;
  /** Confirmation requests seen on the stream: the page asks for their full input when they change. */
  readonly confirmationsSeen: number;
}

/**
 * A session's conversation, live: metis's browser client (reconnect, resume from the cursor, duplicate
 * and seq checks) feeding its reducer, as the CLI's `tail` does. A reload starts from a snapshot, laid
 * over the session's stored events up to it (session-model.ts), so earlier turns read as they did live;
 * a dropped connection resumes from the last event id, and the note says how many events the resume
 * replayed (those made before it reconnected).
 */
export function useLiveSession(sessionId: string): LiveSession {
  const [live, setLive] = useState<LiveSession>(() => blank());
  const closed = useRef(false);
  useEffect(() => {
    closed.current = false;
    setLive(blank());
    const client = new MetisClient({
      url: location.origin,
      token: accessKey() ?? undefined,
      sessionId,
      filter: 'preset:full',
      snapshot: true,
      backoff: { minMs: 250, maxMs: 4000 },
    });
    let model: SessionModel = EMPTY_MODEL;
    let confirmationsSeen = 0;
    let resumedAt: number | null = null;
    let replayed = 0;
    let wasConnected = false;
    let pending: Partial<LiveSession> = {};
    let scheduled = false;
    // Many frames arrive per frame of the screen while a model streams: render once per animation frame.
    const publish = (change: Partial<LiveSession>) => {
      pending = { ...pending, ...change };
      if (scheduled) return;
      scheduled = true;
      requestAnimationFrame(() => {
        scheduled = false;
        const next = pending;
        pending = {};
        if (!closed.current) setLive((current) => ({ ...current, ...next }));
      });
    };
    (async () => {
      for await (const item of client) {
        if (item.kind === 'status') {
          if (item.status === 'connected') {
            if (wasConnected) {
              resumedAt = Date.now();
              replayed = 0;
            }
            wasConnected = true;
            publish({ link: 'connected', note: resumedAt === null ? null : 'resumed, 0 events replayed' });
          } else {
            publish({ link: item.status, note: item.status === 'reconnecting' ? 'reconnecting…' : null });
          }
          continue;
        }
        if (item.kind === 'resync') {
          publish({ note: `resynchronised: ${item.reason}` });
          continue;
        }
        if (item.kind !== 'frame') continue;
        const frame = item.frame;
        if (frame.type === 'snapshot') {
          // What the snapshot's messages do not say (tool statuses, footers) comes from the store.
          // Frames that arrive meanwhile wait in the client's queue.
          model = await fromSnapshot(sessionId, frame).catch(() => step(model, frame));
          if (closed.current) break;
          publish(model);
          continue;
        }
        const before = model.figures;
        model = step(model, frame);
        const change: { -readonly [K in keyof LiveSession]?: LiveSession[K] } = { state: model.state };
        if (model.figures !== before) change.figures = model.figures;
        if (frame.type === 'event') {
          const event = frame.event as { id: string; type: string };
          if (resumedAt !== null && eventIdMillis(event.id) <= resumedAt) {
            replayed += 1;
            change.note = `resumed, ${replayed} event${replayed === 1 ? '' : 's'} replayed`;
          }
          if (event.type.startsWith('tool.confirmation_')) {
            confirmationsSeen += 1;
            change.confirmationsSeen = confirmationsSeen;
          }
        }
        publish(change);
      }
      if (!closed.current) setLive((current) => ({ ...current, link: 'stopped', failure: client.failure }));
    })();
    return () => {
      closed.current = true;
      client.close();
    };
  }, [sessionId]);
  return live;
}

function blank(): LiveSession {
  return {
    ...EMPTY_MODEL,
    link: 'connecting',
    note: null,
    failure: null,
    confirmationsSeen: 0,
  };
}
