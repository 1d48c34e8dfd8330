import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

/** The metis data folder: `$METIS_HOME`, else `~/.metis`. */
export function metisHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.METIS_HOME ? resolve(env.METIS_HOME) : join(homedir(), '.metis');
}

/** The database file: `--db` wins, then config, then `<metis home>/metis.db`. */
export function resolveDbPath(explicit?: string | null, env: NodeJS.ProcessEnv = process.env): string {
  return explicit ? resolve(explicit) : join(metisHome(env), 'metis.db');
}

/** Creates the folder that holds a database with mode 0700 when it does not exist yet. */
export function ensurePrivateDir(filePath: string): void {
  const dir = dirname(filePath);
  if (!existsSync(dir)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
  }
}
