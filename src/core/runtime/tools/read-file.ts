import type { Stats } from 'node:fs';
import { open, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { defineTool, ToolError } from './tool.js';

export const DEFAULT_READ_FILE_MAX_BYTES = 64 * 1024;

export interface ReadFileToolOptions {
  /** Most bytes of a file returned to the model; the rest is cut with a marker. Default 64 KiB. */
  readonly maxBytes?: number;
}

const inputSchema = z.strictObject({
  path: z
    .string()
    .min(1)
    .describe('Path of the file to read; a relative path is resolved against the workspace.'),
});

/**
 * `read_file`: returns a text file of the workspace (or any absolute path), cut at `maxBytes`.
 * Only regular files are read: a directory, FIFO or device fails with `execution_error` (a FIFO or a
 * terminal could block forever, `/dev/zero` never ends). Files larger than the cap are never loaded whole.
 */
export function createReadFileTool(options: ReadFileToolOptions = {}) {
  const maxBytes = options.maxBytes ?? DEFAULT_READ_FILE_MAX_BYTES;
  if (!Number.isInteger(maxBytes) || maxBytes <= 0) {
    throw new RangeError(`read_file maxBytes must be a positive integer, got ${maxBytes}`);
  }

  return defineTool({
    name: 'read_file',
    description:
      `Reads a text file and returns its content. Relative paths are resolved against the workspace folder. ` +
      `Content longer than ${maxBytes} bytes is truncated; binary files are reported, not shown.`,
    inputSchema,
    sideEffects: 'read',
    summarize: (input) => ({ input_summary: `read ${input.path}` }),
    async execute(input, context) {
      const { signal } = context;
      const target = path.resolve(context.workspacePath, input.path);
      try {
        if (signal.aborted) throw new ToolError('cancelled', 'read_file was cancelled before it started');
        const stats = await stat(target);
        if (stats.isDirectory()) {
          throw new ToolError('execution_error', `${input.path} is a directory, not a file`);
        }
        if (!stats.isFile()) {
          throw new ToolError('execution_error', `${input.path} is not a regular file (${fileKind(stats)})`);
        }
        const { data, totalBytes } =
          stats.size <= maxBytes
            ? await readWhole(target, signal)
            : await readHead(target, maxBytes, stats.size, signal);
        return { content: render(input.path, data, totalBytes, maxBytes) };
      } catch (error) {
        throw toToolError(error, input.path);
      }
    },
  });
}

async function readWhole(target: string, signal: AbortSignal): Promise<{ data: Buffer; totalBytes: number }> {
  const data = await readFile(target, { signal });
  return { data, totalBytes: data.length };
}

/** Reads the first `maxBytes` bytes only: a large file is never loaded whole. */
async function readHead(
  target: string,
  maxBytes: number,
  size: number,
  signal: AbortSignal,
): Promise<{ data: Buffer; totalBytes: number }> {
  const handle = await open(target, 'r');
  try {
    const buffer = Buffer.alloc(maxBytes);
    let filled = 0;
    while (filled < maxBytes) {
      signal.throwIfAborted();
      const { bytesRead } = await handle.read(buffer, filled, maxBytes - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    signal.throwIfAborted();
    return { data: buffer.subarray(0, filled), totalBytes: Math.max(size, filled) };
  } finally {
    await handle.close();
  }
}

function render(displayPath: string, data: Buffer, totalBytes: number, maxBytes: number): string {
  if (totalBytes === 0) return '(empty file)';
  if (data.includes(0)) {
    return `[binary file: ${displayPath} is ${totalBytes} bytes and contains NUL bytes; content not shown]`;
  }
  if (data.length <= maxBytes && totalBytes <= data.length) return data.toString('utf8');
  const cut = completeUtf8Prefix(data.subarray(0, Math.min(maxBytes, data.length)));
  return `${data.subarray(0, cut).toString('utf8')}\n[... truncated ${totalBytes - cut} bytes]`;
}

/** Length of the longest prefix of `data` that does not end inside a UTF-8 sequence. */
function completeUtf8Prefix(data: Buffer): number {
  for (let i = data.length - 1; i >= 0 && i >= data.length - 4; i--) {
    const byte = data[i]!;
    if ((byte & 0xc0) === 0x80) continue; // continuation byte: look further back
    const length = byte < 0x80 ? 1 : byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : 2;
    return i + length <= data.length ? data.length : i;
  }
  return data.length;
}

function fileKind(stats: Stats): string {
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isSocket()) return 'a socket';
  if (stats.isCharacterDevice()) return 'a character device';
  if (stats.isBlockDevice()) return 'a block device';
  return 'a special file';
}

function toToolError(error: unknown, displayPath: string): ToolError {
  if (error instanceof ToolError) return error;
  const err = error as NodeJS.ErrnoException;
  if (err?.name === 'AbortError' || err?.code === 'ABORT_ERR') {
    return new ToolError('cancelled', `reading ${displayPath} was cancelled`);
  }
  switch (err?.code) {
    case 'ENOENT':
    case 'ENOTDIR':
      return new ToolError('not_found', `no such file: ${displayPath}`);
    case 'EACCES':
    case 'EPERM':
      return new ToolError('permission_denied', `permission denied reading ${displayPath}`);
    case 'EISDIR':
      return new ToolError('execution_error', `${displayPath} is a directory, not a file`);
    default:
      return new ToolError(
        'execution_error',
        `could not read ${displayPath}: ${err?.message ?? String(error)}`,
      );
  }
}
