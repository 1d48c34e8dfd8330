import type { Logger } from 'pino';

/**
 * A warning logged at most once per `intervalMs`, saying how many like it were held back since: a flood
 * of refused messages (anyone on the broker can send them) must not flood the log.
 */
export function sparingWarner(
  logger: Logger,
  intervalMs = 10_000,
): (fields: Record<string, unknown>, message: string) => void {
  let lastAt = Number.NEGATIVE_INFINITY;
  let heldBack = 0;
  return (fields, message) => {
    const now = performance.now();
    if (now - lastAt < intervalMs) {
      heldBack += 1;
      return;
    }
    logger.warn({ ...fields, ...(heldBack > 0 ? { like_this_not_logged: heldBack } : {}) }, message);
    lastAt = now;
    heldBack = 0;
  };
}
