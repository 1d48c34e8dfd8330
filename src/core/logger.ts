import { type DestinationStream, type Logger, pino } from 'pino';
import pretty from 'pino-pretty';

export type { Logger } from 'pino';

/**
 * Structured logs for metis internals (bus diagnostics, store warnings). Logs go to stderr so that
 * stdout stays clean for command output, and never carry message text or secrets.
 */
export function createLogger(options: { level?: string; destination?: DestinationStream } = {}): Logger {
  const level = options.level ?? process.env.METIS_LOG_LEVEL ?? 'warn';
  return pino({ name: 'metis', level, base: undefined }, options.destination ?? pino.destination(2));
}

/**
 * The log format of a long-running command: one JSON object per line for machines (a pipe, a file, a
 * service manager), readable lines on a terminal (time, level, message, fields). `METIS_LOG_FORMAT`
 * (`json` or `pretty`) overrides; colour follows NO_COLOR / FORCE_COLOR.
 */
export function logFormatFor(
  stream: { readonly isTTY?: boolean },
  env: NodeJS.ProcessEnv = process.env,
): 'json' | 'pretty' {
  const asked = env.METIS_LOG_FORMAT;
  if (asked === 'json' || asked === 'pretty') return asked;
  return stream.isTTY === true && env.TERM !== 'dumb' ? 'pretty' : 'json';
}

/** A logger writing to stderr in `format`; the pretty one writes synchronously (no worker thread). */
export function createServiceLogger(
  level: string,
  format: 'json' | 'pretty',
  env: NodeJS.ProcessEnv = process.env,
): Logger {
  if (format === 'json') return createLogger({ level });
  const colorize = env.NO_COLOR
    ? false
    : env.FORCE_COLOR !== undefined
      ? env.FORCE_COLOR !== '0'
      : process.stderr.isTTY === true;
  const stream = pretty({
    destination: 2,
    sync: true,
    colorize,
    translateTime: 'HH:MM:ss.l',
    ignore: 'name',
  });
  return pino({ name: 'metis', level, base: undefined }, stream);
}

/** A logger that discards everything: for library users who pass none and for benchmarks. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
