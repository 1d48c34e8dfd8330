import { describe, expect, it } from 'vitest';
import { redactUrl } from '../../src/core/store/store-copy.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** A store setting may hold a password in any shape: no message prints it. */
describe('the password in a store setting', () => {
  it('is not printed when the setting is not a postgres:// URL', async () => {
    for (const value of [
      'admin:s3cret@db.example:5432/metis',
      'host=db user=admin password=s3cret',
      'mysql://a:s3cret@h/d',
    ]) {
      const result = await runCli(['trace', 'stats'], tempDir(), { METIS_STORE_URL: value });
      expect(result.exitCode, value).toBe(2);
      expect(result.stderr).toContain('$METIS_STORE_URL: must be a postgres:// URL');
      expect(result.stderr).not.toContain('s3cret');
    }
  }, 60_000);

  it('is hidden in a URL the parser refuses', () => {
    expect(redactUrl('postgres://u:p/ss@db.example/metis')).toBe('postgres://***@db.example/metis');
    expect(redactUrl('postgres://u:s3cret@db.example:5432/metis')).toBe(
      'postgres://u:***@db.example:5432/metis',
    );
    expect(redactUrl('postgres://db.example/metis?password=s3cret')).not.toContain('s3cret');
  });
});
