import { join } from 'node:path';

/**
 * The node arguments that run the real CLI: the compiled build of today's sources the suite's global
 * setup made (compiled-cli.ts), or, when a test runs without it, the sources through tsx.
 */
export function cliNodeArgs(): string[] {
  const compiled = process.env.METIS_TEST_CLI;
  if (compiled !== undefined && compiled !== '') return [compiled];
  return ['--import', import.meta.resolve('tsx'), join(import.meta.dirname, 'cli-entry.ts')];
}
