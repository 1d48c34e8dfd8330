import { appendFile, mkdir, rename, stat } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { MetisEvent } from '../core/events/envelope.js';
import { definePlugin } from './define-plugin.js';
import { filterFrom, filterOptions } from './filter-options.js';

export const JsonlSinkOptions = z.strictObject({
  /** The file; relative to the config file's folder (the data folder without one). */
  path: z.string().min(1).default('events.jsonl'),
  /** Rotate before the file would grow past this many bytes. */
  max_bytes: z
    .number()
    .int()
    .positive()
    .default(10 * 1024 * 1024),
  /** Rotated files kept: `file.1` (newest) … `file.<max_files>`; older ones are deleted. */
  max_files: z.number().int().min(1).max(1000).default(5),
  ...filterOptions,
});

/**
 * Appends each event as one JSON line, rotating by size: `events.jsonl` → `events.jsonl.1` →
 * `events.jsonl.2` … A batch that crosses the limit is split at a line boundary, so every file holds
 * whole lines and stays under `max_bytes` unless one line alone is larger.
 */
export class RotatingFile {
  private size = -1;

  constructor(
    readonly path: string,
    private readonly maxBytes: number,
    private readonly maxFiles: number,
  ) {}

  async append(lines: readonly string[]): Promise<void> {
    if (this.size < 0) {
      await mkdir(dirname(this.path), { recursive: true });
      this.size = await stat(this.path).then(
        (s) => s.size,
        () => 0,
      );
    }
    let chunk = '';
    let chunkBytes = 0;
    for (const line of lines) {
      const bytes = Buffer.byteLength(line);
      if (this.size + chunkBytes + bytes > this.maxBytes && this.size + chunkBytes > 0) {
        await this.write(chunk, chunkBytes);
        chunk = '';
        chunkBytes = 0;
        await this.rotate();
      }
      chunk += line;
      chunkBytes += bytes;
    }
    await this.write(chunk, chunkBytes);
  }

  private async write(chunk: string, bytes: number): Promise<void> {
    if (bytes === 0) return;
    // Events can be private (bus spec §4.4): the file is readable by its owner only.
    await appendFile(this.path, chunk, { mode: 0o600 });
    this.size += bytes;
  }

  private async rotate(): Promise<void> {
    for (let i = this.maxFiles - 1; i >= 1; i -= 1) {
      await rename(`${this.path}.${i}`, `${this.path}.${i + 1}`).catch(ignoreMissing);
    }
    await rename(this.path, `${this.path}.1`).catch(ignoreMissing);
    this.size = 0;
  }
}

function ignoreMissing(error: NodeJS.ErrnoException): void {
  if (error.code !== 'ENOENT') throw error;
}

/** `jsonl-sink`: matching events appended to a JSONL file with size-based rotation; batch path. */
export default definePlugin({
  name: 'jsonl-sink',
  optionsSchema: JsonlSinkOptions,
  create(options, ctx) {
    const path = isAbsolute(options.path)
      ? options.path
      : resolve(ctx.configDir ?? ctx.dataDir, options.path);
    const file = new RotatingFile(path, options.max_bytes, options.max_files);
    const line = (event: MetisEvent) => `${JSON.stringify(event)}\n`;
    let written = 0;
    return {
      filter: filterFrom(options),
      fastPath: false,
      async handle(event) {
        await file.append([line(event)]);
        written += 1;
      },
      async handleBatch(events) {
        await file.append(events.map(line));
        written += events.length;
      },
      start() {
        ctx.logger.info({ path }, 'jsonl-sink writing');
      },
      stats: () => ({ written }),
    };
  },
});
