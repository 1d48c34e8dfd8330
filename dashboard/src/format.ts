/** Money as a person reads it: $0.0042, $1.20. */
export function usd(value: number | null | undefined): string {
  if (value === null || value === undefined) return '–';
  if (value === 0) return '$0';
  if (value < 0.0001) return '<$0.0001';
  return value < 0.01 ? `$${value.toFixed(4)}` : `$${value.toFixed(2)}`;
}

export function bytes(value: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let n = value;
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? n : n.toFixed(1)} ${units[unit]}`;
}

/** "3 s ago", "5 min ago", or the date for anything older than a day. */
export function ago(iso: string | null, now = Date.now()): string {
  if (iso === null) return '–';
  const ms = now - Date.parse(iso);
  if (Number.isNaN(ms)) return iso;
  if (ms < 60_000) return `${Math.max(0, Math.round(ms / 1000))} s ago`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min ago`;
  if (ms < 86_400_000) return `${Math.round(ms / 3_600_000)} h ago`;
  return new Date(iso).toLocaleString();
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '–';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

export function microsToIso(us: number): string {
  return new Date(Math.floor(us / 1000)).toISOString();
}

/** The millisecond an event id (evt_<ULID>) was made: the first 10 Crockford base-32 digits. */
export function eventIdMillis(id: string): number {
  const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
  let ms = 0;
  for (const char of id.slice(4, 14)) ms = ms * 32 + alphabet.indexOf(char.toUpperCase());
  return ms;
}
