/** How long a server gets to answer a probe. */
const PROBE_TIMEOUT_MS = 3000;

/**
 * A GET bounded by a timer of our own: `AbortSignal.timeout` does not keep the process alive, and a
 * peer that accepts and drops the connection can leave fetch waiting on nothing, so the process would
 * end mid-check (exit 13, an unsettled await) instead of reporting.
 */
export async function probe(url: string, headers: Record<string, string> = {}): Promise<Response> {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new Error(`no answer within ${PROBE_TIMEOUT_MS / 1000} s`)),
    PROBE_TIMEOUT_MS,
  );
  try {
    return await fetch(url, { headers, signal: controller.signal });
  } finally {
    clearTimeout(timer);
  }
}
