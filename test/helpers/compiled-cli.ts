import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { build } from 'esbuild';

const ROOT = join(import.meta.dirname, '../..');
const PREFIX = '.test-build-';
const STALE_MS = 3600_000;

function sourceFiles(folder: string): string[] {
  return readdirSync(folder)
    .sort()
    .flatMap((name) => {
      const path = join(folder, name);
      if (statSync(path).isDirectory()) return sourceFiles(path);
      return name.endsWith('.ts') ? [path] : [];
    });
}

/**
 * Global setup: the CLI the tests run as child processes, compiled from today's `src/` with esbuild
 * (each file on its own, no bundling) into `.test-build-<hash of the sources>/`. A child then starts
 * on plain JavaScript: under tsx each start paid ~0.6 s of CPU to hook and transform, and the suite
 * starts hundreds. The folder sits beside `src/` at the same depth, so the paths the code finds
 * relative to its own file (package.json, dist/dashboard) are the same as from `src/` or `dist/`.
 * Exported to the test processes as METIS_TEST_CLI (the entry script).
 */
export default async function compileCli(): Promise<void> {
  const files = sourceFiles(join(ROOT, 'src'));
  const hash = createHash('sha256');
  for (const file of files) hash.update(relative(ROOT, file)).update('\0').update(readFileSync(file));
  const folder = join(ROOT, `${PREFIX}${hash.digest('hex').slice(0, 16)}`);
  const entry = join(folder, 'test-cli.js');
  if (!existsSync(entry)) {
    // Built aside and renamed into place: a suite running beside this one never sees half a build.
    const building = `${folder}.${process.pid}.tmp`;
    await build({
      entryPoints: files,
      outdir: building,
      outbase: join(ROOT, 'src'),
      format: 'esm',
      platform: 'node',
      target: 'node20',
      sourcemap: 'inline',
      logLevel: 'error',
    });
    writeFileSync(
      join(building, 'test-cli.js'),
      "import { run } from './cli.js';\n\nawait run(process.argv);\n",
    );
    try {
      renameSync(building, folder);
    } catch {
      rmSync(building, { recursive: true, force: true }); // another suite built the same sources first
    }
  }
  for (const name of readdirSync(ROOT)) {
    const path = join(ROOT, name);
    if (name.startsWith(PREFIX) && path !== folder && Date.now() - statSync(path).mtimeMs > STALE_MS)
      rmSync(path, { recursive: true, force: true });
  }
  process.env.METIS_TEST_CLI = entry;
}
