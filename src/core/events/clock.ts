/**
 * Microsecond UTC timestamps (bus spec §4.1). `Date` has millisecond resolution, so the sub-millisecond
 * part comes from the monotonic high-resolution clock anchored to the process start.
 */
const originUs = Math.round(performance.timeOrigin * 1000);
let lastUs = 0;

/** Unix time in microseconds, never decreasing within the process. */
export function nowMicros(): number {
  const us = originUs + Math.floor(performance.now() * 1000);
  lastUs = Math.max(us, lastUs);
  return lastUs;
}

export function microsToIso(us: number): string {
  const ms = Math.floor(us / 1000);
  const iso = new Date(ms).toISOString(); // 2026-11-22T07:37:03.123Z
  const micros = String(us % 1000).padStart(3, '0');
  return `${iso.slice(0, 23)}${micros}Z`;
}

/** Parses an ISO timestamp (with up to microsecond precision) to unix microseconds. */
export function isoToMicros(iso: string): number {
  const match = /\.(\d+)Z$/.exec(iso);
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return Number.NaN;
  const fraction = match?.[1] ?? '';
  const extraMicros = fraction.length > 3 ? Number(fraction.slice(3, 6).padEnd(3, '0')) : 0;
  return ms * 1000 + extraMicros;
}
