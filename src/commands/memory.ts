import { resolve } from 'node:path';
import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { MEMORY_FILES, type MemoryFileKey, sizeOf } from '../core/runtime/memory/memory-file.js';
import { readMemoryFile } from '../core/runtime/memory/memory-store.js';
import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface MemoryShowOptions {
  workspace?: string;
  file?: MemoryFileKey;
  config?: string;
  json?: boolean;
}

export interface MemoryClearOptions {
  workspace?: string;
  file?: MemoryFileKey;
  yes?: boolean;
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

function filesOf(file: MemoryFileKey | undefined): MemoryFileKey[] {
  return file === undefined ? ['memory', 'user'] : [file];
}

/**
 * `metis memory show`: the workspace's memory files as the model gets them, read here (no server
 * needed). A file over `runtime.memory.max_bytes` or malformed is an error naming it.
 */
export async function memoryShowCommand(options: MemoryShowOptions): Promise<void> {
  const workspace = resolve(options.workspace ?? process.cwd());
  const { config } = await loadConfig({ explicitPath: options.config ?? null });
  const maxBytes = config.runtime.memory.max_bytes;
  const files = [];
  for (const key of filesOf(options.file)) {
    const snapshot = await readMemoryFile(workspace, MEMORY_FILES[key], maxBytes);
    files.push({
      file: snapshot.file,
      path: snapshot.path,
      exists: snapshot.exists,
      size_bytes: sizeOf(snapshot.text),
      entries: snapshot.document.entries,
    });
  }
  if (options.json) {
    console.log(JSON.stringify({ workspace, max_bytes: maxBytes, files }));
    return;
  }
  const blocks = files.map((f) => {
    const head = `${f.file}  ${f.path}  ${f.size_bytes}/${maxBytes} bytes, ${f.entries.length} entries`;
    const body = f.exists ? f.entries.map((e) => `  - ${e.split('\n').join('\n    ')}`) : ['  (no file)'];
    return [head, ...(f.entries.length === 0 && f.exists ? ['  (empty)'] : body)].join('\n');
  });
  console.log(blocks.join('\n\n'));
}

/**
 * `metis memory clear`: empties the memory files through the running server, which records
 * `memory.eviction` with trigger `manual`. Asks for `--yes`: every entry goes.
 */
export async function memoryClearCommand(options: MemoryClearOptions): Promise<void> {
  const workspace = resolve(options.workspace ?? process.cwd());
  const names = filesOf(options.file).map((key) => MEMORY_FILES[key]);
  if (!options.yes) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `clearing drops every entry of ${names.join(' and ')} in ${workspace}`,
      { hint: 'Pass --yes to clear; `metis memory show` prints what would go.' },
    );
  }
  const body = await apiRequest(await serverTarget(options), 'POST', '/memory/clear', {
    workspace_path: workspace,
    ...(options.file === undefined ? {} : { file: options.file }),
  });
  if (options.json) {
    console.log(JSON.stringify(body));
    return;
  }
  const cleared = body.cleared as { file: string; path: string; entries_evicted: number }[];
  for (const c of cleared) console.log(`${c.file} cleared: ${c.entries_evicted} entries removed (${c.path})`);
}
