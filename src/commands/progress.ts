import { type ProgressResult, progress, type SpinnerResult, spinner } from '@clack/prompts';

export interface Progress {
  update(done: number, total?: number): void;
  /** Ends the live line: with a summary it stays on screen (✓ …), without one it is cleared. */
  finish(summary?: string): void;
  /** Ends the live line marked as failed. */
  fail(message: string): void;
}

const NO_PROGRESS: Progress = { update: () => {}, finish: () => {}, fail: () => {} };

/** How often the line is redrawn at most: a sweep reports every batch of a few milliseconds. */
const REDRAW_MS = 100;

/**
 * Progress of long work on stderr, with clack's bar when the total is known and its spinner when not:
 * only when stderr is a terminal (never in pipes, logs or tests), so stdout stays the command's output.
 * The line starts at the first update: work that ends at once shows nothing.
 */
export function stderrProgress(label: string, stream: NodeJS.WriteStream = process.stderr): Progress {
  if (!stream.isTTY) return NO_PROGRESS;
  let live:
    | { kind: 'bar'; bar: ProgressResult; shown: number }
    | { kind: 'spin'; bar: SpinnerResult }
    | null = null;
  let lastDraw = 0;
  const text = (done: number, total?: number) =>
    total === undefined
      ? `${label}: ${done.toLocaleString('en-US')}`
      : `${label}: ${done.toLocaleString('en-US')} of ${total.toLocaleString('en-US')}`;
  return {
    update(done, total) {
      const now = Date.now();
      if (live !== null && now - lastDraw < REDRAW_MS && (total === undefined || done < total)) return;
      lastDraw = now;
      if (live === null) {
        live =
          total === undefined
            ? { kind: 'spin', bar: spinner({ output: stream }) }
            : { kind: 'bar', bar: progress({ output: stream, max: Math.max(total, 1) }), shown: 0 };
        live.bar.start(text(done, total));
      }
      if (live.kind === 'bar') {
        live.bar.advance(Math.max(0, done - live.shown), text(done, total));
        live.shown = Math.max(live.shown, done);
      } else live.bar.message(text(done, total));
    },
    finish(summary) {
      if (live === null) return;
      if (summary === undefined) live.bar.clear();
      else live.bar.stop(summary);
      live = null;
    },
    fail(message) {
      live?.bar.error(message);
      live = null;
    },
  };
}

/**
 * A spinner on stderr around work whose length is not counted (a backup, a restore): started at once,
 * stopped with the outcome. Nothing when stderr is not a terminal.
 */
export async function withSpinner<T>(
  label: string,
  work: () => T | Promise<T>,
  done: (result: T) => string,
  stream: NodeJS.WriteStream = process.stderr,
  /** Receives a function that changes the spinner's text (what long work is at now). */
  onLabel?: (update: (text: string) => void) => void,
): Promise<T> {
  if (!stream.isTTY) return work();
  const spin = spinner({ output: stream, indicator: 'timer' });
  spin.start(label);
  onLabel?.((text) => spin.message(text));
  // Let the first frame reach the terminal before synchronous work holds the loop.
  await new Promise((resolve) => setImmediate(resolve));
  try {
    const result = await work();
    spin.stop(done(result));
    return result;
  } catch (error) {
    spin.error(`${label}: failed`);
    throw error;
  }
}
