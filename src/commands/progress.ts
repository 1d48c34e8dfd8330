export interface Progress {
  update(done: number, total?: number): void;
  /** Clears the progress line. */
  finish(): void;
}

const NO_PROGRESS: Progress = { update: () => {}, finish: () => {} };

/**
 * A one-line progress counter on stderr, shown only when stderr is a terminal (never in pipes, logs or
 * tests) and redrawn at most every 100 ms.
 */
export function stderrProgress(label: string, stream: NodeJS.WriteStream = process.stderr): Progress {
  if (!stream.isTTY) return NO_PROGRESS;
  let lastDraw = 0;
  let shown = false;
  return {
    update(done, total) {
      const now = Date.now();
      const complete = total !== undefined && done >= total;
      if (now - lastDraw < 100 && !complete) return;
      lastDraw = now;
      shown = true;
      const of = total === undefined ? '' : `/${total} (${Math.floor((done * 100) / Math.max(total, 1))}%)`;
      stream.write(`\r${label} ${done}${of}\x1b[K`);
    },
    finish() {
      if (shown) stream.write('\r\x1b[K');
      shown = false;
    },
  };
}
