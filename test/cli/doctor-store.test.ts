import { describe, expect, it } from 'vitest';
import { PG_SCHEMA_VERSION } from '../../src/core/store/postgres/schema.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { tempDir } from '../helpers/tmp.js';

/** `metis doctor` says whether the PostgreSQL store `metis serve` would use is ready, changing nothing. */

const pg = postgresForFile();

async function storeCheck(url: string) {
  const result = await runCli(['doctor', '--json'], tempDir(), { METIS_STORE_URL: url });
  const report = JSON.parse(result.stdout) as { checks: { name: string; status: string; detail: string }[] };
  return { exitCode: result.exitCode, store: report.checks.find((check) => check.name === 'store') };
}

describe.skipIf(!postgresTestsRun)('metis doctor with a PostgreSQL store', () => {
  it('an empty database is ready, and stays empty', async () => {
    const url = freshDatabase(pg);
    const { store } = await storeCheck(url);
    expect(store).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('empty: metis serve creates'),
    });
    expect(store!.detail).toContain('$METIS_STORE_URL');
    expect(
      pg
        .psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", new URL(url).pathname.slice(1))
        .trim(),
    ).toBe('0');
  }, 60_000);

  it('a store a server holds is reported as in use, and the doctor does not take it', async () => {
    const url = freshDatabase(pg);
    const service = await serveOnStore(url);
    const { store, exitCode } = await storeCheck(url);
    expect(exitCode).toBe(0);
    expect(store).toMatchObject({ status: 'ok', detail: expect.stringContaining('uses it now') });
    await service.stop();
    const free = await storeCheck(url);
    expect(free.store!.detail).toContain(`schema ${PG_SCHEMA_VERSION}`);
    expect(free.store!.detail).not.toContain('uses it now');
  }, 60_000);

  it('a schema table without its row (an interrupted first start) is empty, not newer', async () => {
    const url = freshDatabase(pg);
    pg.psql('CREATE TABLE metis_schema (version integer NOT NULL)', new URL(url).pathname.slice(1));
    const { store } = await storeCheck(url);
    expect(store).toMatchObject({ status: 'ok', detail: expect.stringContaining('empty') });
  }, 60_000);

  it('an unreachable store or a newer schema is a problem (exit 1), named without its password', async () => {
    const down = await storeCheck(`postgres://metis:s3cret@127.0.0.1:${pg.port + 1}/x`);
    expect(down.exitCode).toBe(1);
    expect(down.store).toMatchObject({
      status: 'problem',
      detail: expect.stringContaining('nothing accepts connections'),
    });
    expect(down.store!.detail).not.toContain('s3cret');

    const url = freshDatabase(pg);
    const database = new URL(url).pathname.slice(1);
    pg.psql(
      'CREATE TABLE metis_schema (version integer NOT NULL); INSERT INTO metis_schema VALUES (99)',
      database,
    );
    const newer = await storeCheck(url);
    expect(newer.exitCode).toBe(1);
    expect(newer.store).toMatchObject({
      status: 'problem',
      detail: expect.stringContaining('schema version 99'),
    });
  }, 60_000);
});
