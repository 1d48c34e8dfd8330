import { join } from 'node:path';
import { execa } from 'execa';

const ENTRY = join(import.meta.dirname, 'cli-entry.ts');
const ROOT = join(import.meta.dirname, '../..');

export interface CliResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `metis <args>` from source as a real child process, with METIS_HOME pointing at `home`. */
export async function runCli(args: readonly string[], home: string): Promise<CliResult> {
  const result = await execa(process.execPath, ['--import', 'tsx', ENTRY, ...args], {
    cwd: ROOT,
    reject: false,
    stdin: 'ignore',
    env: { METIS_HOME: home, NODE_ENV: 'test', NO_COLOR: '1' },
  });
  return { exitCode: result.exitCode ?? -1, stdout: String(result.stdout), stderr: String(result.stderr) };
}
