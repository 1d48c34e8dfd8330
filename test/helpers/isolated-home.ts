import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Global setup: every test process inherits a throwaway METIS_HOME, so code that falls back to the
 * default home (the local token file, the default database) never touches the real `~/.metis`.
 */
export default function isolateMetisHome(): () => void {
  const home = mkdtempSync(join(tmpdir(), 'metis-suite-home-'));
  process.env.METIS_HOME = home;
  return () => rmSync(home, { recursive: true, force: true });
}
