import { constants, type Stats } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { z } from 'zod';
import { fileAccessConfirmation, type OutsideWorkspacePolicy } from './file-access.js';
import { SecretPaths } from './secret-paths.js';
import { type CallCheck, defineTool, type ToolContext, ToolError } from './tool.js';
import { completeUtf8Prefix } from './utf8-cut.js';
import { type ResolvedPath, resolveInWorkspace } from './workspace-path.js';

export const DEFAULT_READ_FILE_MAX_BYTES = 64 * 1024;

export interface ReadFileToolOptions {
  /** Most bytes of a file returned to the model; the rest is cut with a marker. Default 64 KiB. */
  readonly maxBytes?: number;
  /** `runtime.outside_workspace`: reading a file whose real path is outside the workspace. Default `ask`. */
  readonly outsideWorkspace?: OutsideWorkspacePolicy;
  /** Which files may hold secrets (always asked about). Default: the built-in list only. */
  readonly secrets?: SecretPaths;
}

const inputSchema = z.strictObject({
  path: z
    .string()
    .min(1)
    .refine((p) => !p.includes('\0'), 'must not contain NUL characters')
    .describe('Path of the file to read; a relative path is resolved against the workspace.'),
});

/** The checked read: the resolved path and the identity of the file that was confirmed. */
export interface ReadPlan {
  readonly resolved: ResolvedPath;
  /** What `stat` said at check time; null when the path did not resolve. */
  readonly stats: Stats | null;
  /** The check asked for a confirmation: a run without the dispatcher (nobody to ask) refuses. */
  readonly needsConfirmation: boolean;
}

/**
 * `read_file`: returns a text file, cut at `maxBytes`. The path is resolved with realpath against the
 * workspace; outside it `outsideWorkspace` applies, and files that may hold secrets always ask (see
 * file-access.ts). The file read is the one checked: opened by its real path without following a
 * symlink, and refused if its device and inode differ from those seen at the check (nothing is read
 * when it was swapped between confirmation and read). Only regular files are read: a directory, FIFO
 * or device fails with `execution_error` (a FIFO or a terminal could block forever, `/dev/zero` never
 * ends). Files larger than the cap are never loaded whole.
 */
export function createReadFileTool(options: ReadFileToolOptions = {}) {
  const maxBytes = options.maxBytes ?? DEFAULT_READ_FILE_MAX_BYTES;
  if (!Number.isInteger(maxBytes) || maxBytes <= 0) {
    throw new RangeError(`read_file maxBytes must be a positive integer, got ${maxBytes}`);
  }
  const rules = {
    outsideWorkspace: options.outsideWorkspace ?? 'ask',
    secrets: options.secrets ?? new SecretPaths(),
  };

  async function check(given: string, context: ToolContext): Promise<CallCheck<ReadPlan>> {
    const resolved = await resolveInWorkspace(given, context.workspacePath);
    const confirmation = await fileAccessConfirmation('read_file', 'read', resolved, rules);
    const stats = resolved.failure === null ? await stat(resolved.real).catch(() => null) : null;
    return { prepared: { resolved, stats, needsConfirmation: confirmation !== null }, confirmation };
  }

  return defineTool<typeof inputSchema, ReadPlan>({
    name: 'read_file',
    description:
      `Reads a text file and returns its content. Relative paths are resolved against the workspace folder. ` +
      `A file outside the workspace (after following symlinks) needs the user's approval or is refused, ` +
      `depending on the user's settings; files that may hold secrets (.env, keys, credentials, metis ` +
      `config) always need approval. ` +
      `Content longer than ${maxBytes} bytes is truncated; binary files are reported, not shown.`,
    inputSchema,
    sideEffects: 'read',
    repeatSafe: true,
    summarize: (input) => ({ input_summary: `read ${input.path}` }),
    checkCall: (input, context) => check(input.path, context),
    async execute(input, context, prepared) {
      const { signal } = context;
      try {
        if (signal.aborted) throw new ToolError('cancelled', 'read_file was cancelled before it started');
        const plan = prepared ?? (await check(input.path, context)).prepared;
        if (prepared === undefined && plan.needsConfirmation) {
          throw new ToolError(
            'permission_denied',
            `${plan.resolved.real} needs the user's confirmation (outside the workspace or may hold ` +
              'secrets), and this call did not go through the tool dispatcher that asks for it',
          );
        }
        return { content: await readPlanned(plan, input.path, maxBytes, signal) };
      } catch (error) {
        throw toToolError(error, input.path);
      }
    },
  });
}

async function readPlanned(plan: ReadPlan, displayPath: string, maxBytes: number, signal: AbortSignal) {
  const { resolved, stats } = plan;
  if (resolved.failure !== null) throw resolved.failure;
  // Resolved, then gone before its stat: report it as missing.
  if (stats === null) throw Object.assign(new Error('removed during the check'), { code: 'ENOENT' });
  if (stats.isDirectory())
    throw new ToolError('execution_error', `${displayPath} is a directory, not a file`);
  if (!stats.isFile()) {
    throw new ToolError('execution_error', `${displayPath} is not a regular file (${fileKind(stats)})`);
  }
  // O_NOFOLLOW and O_NONBLOCK: a path swapped for a symlink fails, one swapped for a FIFO cannot block.
  const changed = () =>
    new ToolError(
      'execution_error',
      `${resolved.real} changed between the check and the read (replaced by another file or a symlink); ` +
        'nothing was read',
    );
  const flags = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
  const handle = await open(resolved.real, flags).catch((error: NodeJS.ErrnoException) => {
    throw error.code === 'ELOOP' ? changed() : error;
  });
  try {
    const now = await handle.stat();
    if (now.dev !== stats.dev || now.ino !== stats.ino || !now.isFile()) throw changed();
    const { data, totalBytes } =
      now.size <= maxBytes
        ? await readWhole(handle, signal)
        : await readHead(handle, maxBytes, now.size, signal);
    return render(displayPath, data, totalBytes, maxBytes);
  } finally {
    await handle.close();
  }
}

async function readWhole(
  handle: FileHandle,
  signal: AbortSignal,
): Promise<{ data: Buffer; totalBytes: number }> {
  const data = await handle.readFile({ signal });
  return { data, totalBytes: data.length };
}

/** Reads the first `maxBytes` bytes only: a large file is never loaded whole. */
async function readHead(
  handle: FileHandle,
  maxBytes: number,
  size: number,
  signal: AbortSignal,
): Promise<{ data: Buffer; totalBytes: number }> {
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
    case 'ELOOP':
      return new ToolError('execution_error', `${displayPath}: too many levels of symbolic links (a loop?)`);
    default:
      return new ToolError(
        'execution_error',
        `could not read ${displayPath}: ${err?.message ?? String(error)}`,
      );
  }
}
