import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api } from './api.js';

export interface Polled<T> {
  readonly data: T | null;
  readonly error: ApiError | null;
  readonly refresh: () => void;
}

/**
 * GETs `path` now and every `everyMs`, keeping the last good answer while the server is away (the page
 * says "disconnected, retrying" and recovers by itself when it is back).
 */
export function usePolled<T>(
  path: string | null,
  everyMs: number,
  report: (error: unknown) => void,
): Polled<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [tick, setTick] = useState(0);
  const reportRef = useRef(report);
  reportRef.current = report;
  useEffect(() => {
    if (path === null) return;
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const answer = await api<T>('GET', path);
        if (stopped) return;
        setData(answer);
        setError(null);
      } catch (caught) {
        if (stopped) return;
        const failure = caught instanceof ApiError ? caught : new ApiError(0, 'unreachable', String(caught));
        setError(failure);
        reportRef.current(failure);
      }
      if (!stopped && everyMs > 0) timer = setTimeout(load, everyMs);
    };
    void load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [path, everyMs, tick]);
  return { data, error, refresh: () => setTick((n) => n + 1) };
}

/** The banner of a view whose server went away. */
export function offline(error: ApiError | null): string | null {
  if (error === null || error.status !== 0) return null;
  return 'disconnected, retrying…';
}
