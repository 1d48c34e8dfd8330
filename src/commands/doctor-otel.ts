import type { MetisConfig } from '../core/config/schema.js';
import type { Check } from './doctor-checks.js';

/** How long the OTLP endpoint gets to answer. */
const OTLP_TIMEOUT_MS = 3000;

/**
 * The `otel` plugin's OTLP/HTTP endpoint, when the plugin is configured: that it takes an export. The
 * probe is a real, empty export (`{"resourceSpans":[]}`, with the plugin's headers), which a collector,
 * Jaeger or a hosted backend answers 2xx without storing anything. An endpoint that does not answer, or
 * refuses, is a warning: `metis serve` runs without it, but every span is dropped meanwhile.
 * Null when the plugin is not configured; options the plugin would refuse are the plugins check's.
 */
export async function checkOtlp(config: MetisConfig): Promise<Check | null> {
  const entry = config.plugins.find((p) => (typeof p === 'string' ? p : p[0]) === 'otel');
  if (entry === undefined) return null;
  const { OtelOptions } = await import('../plugins/otel.js');
  const parsed = OtelOptions.safeParse(typeof entry === 'string' ? {} : entry[1]);
  if (!parsed.success) return null;
  const { endpoint, headers } = parsed.data;
  const name = 'otel endpoint';
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new Error(`no answer within ${OTLP_TIMEOUT_MS / 1000} s`)),
    OTLP_TIMEOUT_MS,
  );
  try {
    const response = await fetch(endpoint, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ resourceSpans: [] }),
      signal: controller.signal,
    });
    await response.body?.cancel();
    if (response.ok) return { name, status: 'ok', detail: `${endpoint} takes OTLP exports` };
    const refused = response.status === 401 || response.status === 403;
    return {
      name,
      status: 'warn',
      detail: `${endpoint} answers ${response.status} to an OTLP export; spans would be dropped`,
      hint: refused
        ? "Check the otel plugin's headers (the backend's authorization)."
        : 'Is it the OTLP/HTTP traces path (…/v1/traces) of a collector?',
    };
  } catch (error) {
    const cause = (error as Error).cause as { code?: string; message?: string } | undefined;
    const why = cause?.code ?? cause?.message ?? (error as Error).message;
    return {
      name,
      status: 'warn',
      detail: `${endpoint} does not answer (${why}); spans would be dropped until it does`,
      hint: "Start the collector, or set the otel plugin's endpoint (metis config show prints it).",
    };
  } finally {
    clearTimeout(timer);
  }
}
