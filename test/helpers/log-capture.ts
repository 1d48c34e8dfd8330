import { Writable } from 'node:stream';
import { type Logger, pino } from 'pino';

export interface LogRecord {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export const LEVEL = { debug: 20, info: 30, warn: 40, error: 50 } as const;

/** A real pino logger whose JSON lines are kept in memory, so tests can assert what was logged. */
export function captureLogs(level = 'debug'): {
  logger: Logger;
  records: LogRecord[];
  at: (lvl: number) => LogRecord[];
} {
  const records: LogRecord[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) {
        if (line.trim()) records.push(JSON.parse(line) as LogRecord);
      }
      done();
    },
  });
  const logger = pino({ level }, stream);
  return { logger, records, at: (lvl) => records.filter((r) => r.level === lvl) };
}

/** pino writes asynchronously to a plain stream; give it a turn of the event loop. */
export function settleLogs(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
