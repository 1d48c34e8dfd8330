import { type DestinationStream, type Logger, pino } from 'pino';

export type { Logger } from 'pino';

/**
 * Structured logs for metis internals (bus diagnostics, store warnings). Logs go to stderr so that
 * stdout stays clean for command output, and never carry message text or secrets.
 */
export function createLogger(options: { level?: string; destination?: DestinationStream } = {}): Logger {
  const level = options.level ?? process.env.METIS_LOG_LEVEL ?? 'warn';
  return pino({ name: 'metis', level, base: undefined }, options.destination ?? pino.destination(2));
}

/** A logger that discards everything: for library users who pass none and for benchmarks. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
