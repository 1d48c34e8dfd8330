/** The share of the axis an idle gap keeps once folded: visible, never wider than the work around it. */
const FOLDED_SHARE = 0.04;
/** At most this much of the axis goes to folded gaps, however many there are. */
const FOLDED_CAP = 0.3;

export interface TimeWindow {
  readonly fromMs: number;
  readonly toMs: number;
}

export interface FoldedGap {
  readonly fromMs: number;
  readonly toMs: number;
  /** Where the fold sits on the axis, in [0, 1]. */
  readonly x0: number;
  readonly x1: number;
}

export interface TimeAxis {
  /** Where a moment falls on the axis, in [0, 1] (clamped to the window). */
  readonly x: (ms: number) => number;
  readonly gaps: readonly FoldedGap[];
}

interface Segment {
  fromMs: number;
  toMs: number;
  folded: boolean;
}

/** A pause shorter than this is work (routing, writing the trace), not idleness: it stays to scale. */
const MIN_IDLE_MS = 500;

/**
 * A time axis over `window` on which the stretches where nothing but the enclosing span runs (a
 * model waiting on an approval for minutes, say) are folded to a sliver, so that a 40 ms tool call
 * beside a 3-minute wait still reads as a bar. `busy` are the intervals of the spans drawn; a gap
 * between them longer than `minGapShare` of the window and than half a second is folded.
 */
export function foldedAxis(
  window: TimeWindow,
  busy: readonly { fromMs: number; toMs: number }[],
  minGapShare = 0.15,
): TimeAxis {
  const span = Math.max(1, window.toMs - window.fromMs);
  const merged: { fromMs: number; toMs: number }[] = [];
  for (const interval of [...busy]
    .map((b) => ({ fromMs: Math.max(window.fromMs, b.fromMs), toMs: Math.min(window.toMs, b.toMs) }))
    .filter((b) => b.toMs >= b.fromMs)
    .sort((a, b) => a.fromMs - b.fromMs)) {
    const last = merged.at(-1);
    if (last !== undefined && interval.fromMs <= last.toMs) last.toMs = Math.max(last.toMs, interval.toMs);
    else merged.push({ ...interval });
  }
  const segments: Segment[] = [];
  let cursor = window.fromMs;
  const gapFrom = (toMs: number) => {
    if (toMs <= cursor) return;
    segments.push({
      fromMs: cursor,
      toMs,
      folded: (toMs - cursor) / span > minGapShare && toMs - cursor >= MIN_IDLE_MS,
    });
  };
  for (const interval of merged) {
    gapFrom(interval.fromMs);
    if (interval.toMs > interval.fromMs)
      segments.push({ fromMs: interval.fromMs, toMs: interval.toMs, folded: false });
    cursor = Math.max(cursor, interval.toMs);
  }
  gapFrom(window.toMs);
  const foldedCount = segments.filter((s) => s.folded).length;
  const open = segments.filter((s) => !s.folded).reduce((sum, s) => sum + (s.toMs - s.fromMs), 0);
  if (foldedCount === 0 || open <= 0) return linearAxis(window);
  const foldedShare = Math.min(FOLDED_SHARE, FOLDED_CAP / foldedCount);
  const openShare = 1 - foldedShare * foldedCount;
  const placed: (Segment & { x0: number; x1: number })[] = [];
  let x = 0;
  for (const segment of segments) {
    const width = segment.folded ? foldedShare : (openShare * (segment.toMs - segment.fromMs)) / open;
    placed.push({ ...segment, x0: x, x1: x + width });
    x += width;
  }
  return {
    x: (ms) => {
      if (ms <= window.fromMs) return 0;
      if (ms >= window.toMs) return 1;
      const at = placed.find((s) => ms >= s.fromMs && ms <= s.toMs);
      if (at === undefined) return 0;
      const part = at.toMs === at.fromMs ? 0 : (ms - at.fromMs) / (at.toMs - at.fromMs);
      return at.x0 + part * (at.x1 - at.x0);
    },
    gaps: placed.filter((s) => s.folded).map(({ fromMs, toMs, x0, x1 }) => ({ fromMs, toMs, x0, x1 })),
  };
}

export function linearAxis(window: TimeWindow): TimeAxis {
  const span = Math.max(1, window.toMs - window.fromMs);
  return {
    x: (ms) => Math.min(1, Math.max(0, (ms - window.fromMs) / span)),
    gaps: [],
  };
}

/** The window zoomed by `factor` (2: twice as close) around `centerMs`, kept inside `bounds`. */
export function zoomed(
  bounds: TimeWindow,
  current: TimeWindow,
  factor: number,
  centerMs: number,
): TimeWindow {
  const full = bounds.toMs - bounds.fromMs;
  const width = Math.min(full, Math.max(1, (current.toMs - current.fromMs) / factor));
  let fromMs = centerMs - width / 2;
  fromMs = Math.max(bounds.fromMs, Math.min(fromMs, bounds.toMs - width));
  return { fromMs, toMs: fromMs + width };
}
