import { randomFillSync } from 'node:crypto';
import { decodeTime, encodeTime, monotonicFactory } from 'ulid';

const randomPool = new Uint8Array(4096);
let randomPos = randomPool.length;

/**
 * ulid's default source calls `crypto.getRandomValues` once per random character (~60 µs for the
 * first id of each millisecond); reading a pooled buffer costs ~1 µs. Same CSPRNG, fewer calls.
 */
function pooledRandom(): number {
  if (randomPos === randomPool.length) {
    randomFillSync(randomPool);
    randomPos = 0;
  }
  return randomPool[randomPos++]! / 256;
}

/**
 * One monotonic ULID source per process stamps every event of both families (DESIGN.md invariant 1).
 * Within a millisecond the monotonic factory only increments (~0.3 µs per id).
 */
const nextUlid = monotonicFactory(pooledRandom);

/** Ids never go below this time, so ids stay monotonic across a restart even if the clock went back. */
let floorTimeMs = 0;

export const EVENT_ID_PREFIX = 'evt_';

export function newEventId(): string {
  const now = Date.now();
  return EVENT_ID_PREFIX + nextUlid(Math.max(now, floorTimeMs));
}

/** Prefixed ULID for other entities: `sess_`, `turn_`, `msg_`, `tu_`, `atk_`. */
export function newId(prefix: string): string {
  const now = Date.now();
  return `${prefix}_${nextUlid(Math.max(now, floorTimeMs))}`;
}

/**
 * Called at startup with the newest persisted id: later ids sort after it even when this process's
 * clock is behind the one that wrote it.
 */
export function ensureIdsAfter(lastId: string | null | undefined): void {
  if (!lastId) return;
  const ulidPart = lastId.slice(lastId.indexOf('_') + 1);
  const time = decodeTime(ulidPart);
  if (time + 1 > floorTimeMs) floorTimeMs = time + 1;
}

/** Milliseconds since the epoch encoded in an event id. */
export function eventIdTime(id: string): number {
  return decodeTime(id.slice(id.indexOf('_') + 1));
}

/** A string that sorts just below every event id made at or after `ms`: a range bound for the id index. */
export function eventIdFloor(ms: number): string {
  return EVENT_ID_PREFIX + encodeTime(ms, 10);
}
